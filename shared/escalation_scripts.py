"""The reviewers' queue's Lua scripts (``shared.escalations``): each move of an escalation is
one script, so that a check and the move it allows are atomic in Redis. Apart from the queue
because they are Redis's code, not Python's, and read on their own."""

from __future__ import annotations

__all__ = ["GIVE_BACK", "RESOLVE", "TAKE"]

# Move an entry to ARGV[1] only if it is held by the queue, or by someone idle past ARGV[2] ms.
TAKE = """
local item = redis.call('XPENDING', KEYS[1], ARGV[3], ARGV[4], ARGV[4], '1')[1]
if not item then return -1 end
if item[2] == ARGV[5] or tonumber(item[3]) >= tonumber(ARGV[2]) then
  redis.call('XCLAIM', KEYS[1], ARGV[3], ARGV[1], '0', ARGV[4])
  return 1
end
return 0
"""

# Move an entry held by ARGV[4] back to the queue consumer.
GIVE_BACK = """
local item = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], '1')[1]
if not item then return -1 end
if item[2] ~= ARGV[4] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], '0', ARGV[2])
return 1
"""

# KEYS: 1 escalation stream, 2 the job's resolved record, 3 the job's reply stream,
#       4 the label stream.
# ARGV: 1 group, 2 entry id, 3 reviewer, 4 job id, 5 the resolution message ('' only checks),
#       6 the labels' JSON ('[]' none: the entry still says the job was resolved),
#       7 '1' to publish the resolution on the reply stream
#       ('0' for an audit: the job's result went out already).
# Answers {1, reply entry id}; {2} may resolve (only checked); {0, reviewer, ms, entry}
# resolved before; {-1} not open; {-2, holder} held by another.
RESOLVE = """
local before = redis.call('HMGET', KEYS[2], 'reviewer', 'resolved_at_ms', 'entry_id')
if before[1] then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  return {0, before[1], before[2], before[3]}
end
local item = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], '1')[1]
if not item then return {-1} end
if item[2] ~= ARGV[3] then return {-2, item[2]} end
if ARGV[5] == '' then return {2} end
for _, key in ipairs({KEYS[3], KEYS[4]}) do
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a stream')
  end
end
local now = redis.call('TIME')
local ms = tostring(tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
local id = ''
if ARGV[7] == '1' then
  id = redis.call('XADD', KEYS[3], '*', 'job_id', ARGV[4], 'type', 'resolution',
                  'message', ARGV[5])
end
redis.call('XADD', KEYS[4], '*', 'job_id', ARGV[4], 'entry_id', ARGV[2],
           'resolved_at_ms', ms, 'labels', ARGV[6], 'reviewer', ARGV[3])
redis.call('HSET', KEYS[2], 'reviewer', ARGV[3], 'resolved_at_ms', ms, 'entry_id', ARGV[2],
           'reply_entry_id', id)
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return {1, id}
"""
