"""A batch's budget made by ``decisions budget set`` while the batch runs: counting the claims
that read "no budget" before it was made and committed after (PostgreSQL).

The budget's making (``budget_ops.set_limit``, one transaction) counts what the batch spent
and brings the calls then claimed under it. On PostgreSQL (READ COMMITTED) a claim
transaction that read "no budget" (``budget_ops.budgeted_batches`` / ``applies``) but commits
after that transaction wrote a call no statement of it could see: neither reserved nor
brought in, so its cost went into no budget. Found by an attack: 16 trials of 60 jobs, 4
claimer threads, the budget set once: in 9 trials 4-16 calls were missed (committed
$0.44-0.56 against $0.60 spent), and a limit then lowered to $0.55 still admitted up to 10
more calls. SQLite serialises writers (BEGIN IMMEDIATE): no claim reads between the making
and its commit there, so this is for PostgreSQL only.

So, after the making commits, on PostgreSQL:

1. ``older_transactions``: the transactions running at that moment (their virtual
   transaction ids, as ``CREATE INDEX CONCURRENTLY`` waits for older transactions), and
   ``still_open`` polled until all have ended, within ``LATE_CLAIMS_WAIT_S``. Any claim that
   read "no budget" is one of them; every later claim sees the budget and reserves.
2. ``count_late_claims``, one more transaction: the calls of the batch in flight and not
   under the budget are brought under it (as at its making), and what the calls not under it
   booked since the making is added.

No lock: a table or advisory lock taken here could deadlock with the group commit, whose
transactions mix records, settlements and claims of many batches, and a deadlock (40P01) is
not an error the ledger retries. Waiting for transactions to end takes no lock.

What "booked since the making" is, without marking calls: no call is under a budget before
it exists, and a settled call never changes again (only a ``not_sent`` one is claimed again,
and it books nothing). So the settled calls not under the budget now are those the making
counted plus the late ones that settled since, and the difference of the two sums is theirs.
Marking the counted calls with the scope instead (so that late ones are those without it)
would move what the batch spent before its budget into the budget's booked figures
(``budget_report`` splits a budget by the calls under it): its "spent before the budget"
would read 0. The order in step 2 matters: in flight first, then the sum, each statement
its own snapshot, so a late call settling meanwhile is either brought in (its record waits
for this row lock, then settles into the budget) or settled first (then the sum sees it).

Left as they are: only the transaction that made the budget counts late claims (a second
``budget set`` finds it made); if its process dies between the two steps, late claims stay
uncounted, as before. A late call that settled is counted by its booked cost, as what was
spent before the budget is. A budget made by a job's ``budget_usd`` (in a claim) or a daily
ceiling is not covered: a claim cannot wait for other transactions inside its own. That
misses only claims that carry no budget ask while the budget is made (an attack measured 2
to 8 of 61: a batch whose earlier jobs carried no ``budget_usd``; a fleet rolling a daily
ceiling out), so README says to put ``budget_usd`` on every job of a batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Final

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

from worker.ledger import budget_ops
from worker.ledger.budget_counts import batch_calls, bring_in_flight, not_under, spent_so_far

__all__ = [
    "LATE_CLAIMS_WAIT_S",
    "count_late_claims",
    "older_transactions",
    "still_open",
    "uncounted_warning",
    "wait_for_older",
]

#: How long ``decisions budget set`` waits for transactions begun before it made a budget. A
#: claim's transaction lasts milliseconds; one open longer is a session left in a transaction.
LATE_CLAIMS_WAIT_S: Final = 10.0
_FIRST_POLL_S: Final = 0.005
_LAST_POLL_S: Final = 0.2

# Each transaction holds the lock on its own virtual transaction id until it ends. Only
# client sessions on this database can claim: autovacuum and others are left out.
_OPEN_NOW = text(
    "SELECT l.virtualxid, l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted"
    " AND l.pid <> pg_backend_pid() AND a.datname = current_database()"
    " AND a.backend_type = 'client backend'"
)
_STILL_OPEN = text(
    "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'virtualxid'"
    " AND mode = 'ExclusiveLock' AND granted AND virtualxid IN :vxids"
).bindparams(bindparam("vxids", expanding=True))


def older_transactions(conn: Connection) -> list[str]:
    """The virtual transaction ids of the other client sessions' transactions now open."""
    return sorted({str(vxid) for vxid, _ in conn.execute(_OPEN_NOW)})


def still_open(conn: Connection, vxids: list[str]) -> list[int]:
    """The pids of the sessions whose transaction of ``vxids`` has not ended."""
    if not vxids:
        return []
    return sorted(int(pid) for pid in conn.execute(_STILL_OPEN, {"vxids": vxids}).scalars())


def wait_for_older(
    transaction: Callable[[], AbstractContextManager[Connection]], wait_s: float
) -> list[int]:
    """Wait until the transactions open now have ended, for at most ``wait_s``; the pids of
    the sessions still in one then (none: all ended)."""
    with transaction() as conn:
        vxids = older_transactions(conn)
    deadline = time.monotonic() + wait_s
    pause = _FIRST_POLL_S
    while vxids:
        with transaction() as conn:
            pids = still_open(conn, vxids)
        if not pids:
            return []
        if time.monotonic() >= deadline:
            return pids
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, _LAST_POLL_S)
    return []


def count_late_claims(conn: Connection, batch: str, spent_before: float, now: datetime) -> float:
    """Count in the batch's calls its budget's making could not see (``spent_before``: what
    it counted as spent); what this added."""
    scope = budget_ops.batch_scope(batch)
    flying = bring_in_flight(conn, scope, batch_calls(batch) & not_under(scope))
    # Rounded as costs are: two sums of the same costs may differ in their last bits. Never
    # below 0: no settled call leaves the ledger, so a smaller sum is noise, not a refund.
    settled = max(0.0, round(spent_so_far(conn, batch, outside=scope) - spent_before, 12))
    if flying + settled:
        budget_ops.adjust(conn, scope, flying + settled, now)
    return flying + settled


def uncounted_warning(batch: str, pids: list[int], wait_s: float) -> str:
    """One line for an operator: sessions still in a transaction begun before the budget."""
    return (
        f"budget of batch {batch} set; after {wait_s:g}s {len(pids)} database session(s) "
        f"(pid {', '.join(map(str, pids))}) still in a transaction begun before it: calls "
        "they claim for the batch may not be counted by it"
    )
