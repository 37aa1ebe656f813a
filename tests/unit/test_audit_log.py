"""A batch's audit trail read back from Redis: one entry of stray bytes does not hide the rest."""

from __future__ import annotations

import fakeredis

from shared import keys
from shared.audit import batch_audit


def test_an_entry_of_stray_bytes_is_read_with_replacement_characters() -> None:
    r = fakeredis.FakeRedis()
    log = keys.batch_audit_log("b1")
    r.xadd(log, {"at": "2026-01-01T00:00:00+00:00", "action": "claim", "reviewer": "ann"})
    r.xadd(log, {"at": "2026-01-01T00:00:01+00:00", "action": "claim", "reviewer": b"\xff\xfe"})
    r.xadd(log, {"at": "2026-01-01T00:00:02+00:00", "action": "release", "reviewer": "bob"})
    entries = batch_audit(r, "b1")
    assert [e.reviewer for e in entries] == ["bob", "\ufffd\ufffd", "ann"]  # newest first
