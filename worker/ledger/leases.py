"""Renewing a call's lease while its holder provably still works on it (a heartbeat).

A call's lease (``lease_expires``) says until when its claim belongs to a live delivery; past
it, a reaper or a duplicate delivery books the call ``unknown`` and escalates. Work that
cannot be bounded by the job's deadline (a menu handler runs arbitrary code in a thread)
renews the lease while it runs, so that a live one is never taken for dead.

Renewing is one conditional UPDATE, judged by the database's own clock (never a worker's):
it only touches a call that is still ``claimed`` and whose lease has not run out, and it only
ever moves the lease later. A renewal that changes no row means the claim is no longer the
holder's (a reaper expired it): the holder must stop (``worker.delivery.leased``).

Each claim also keeps its *reach* (``lease_reach_s``): how far past the moment its holder
wrote the lease the lease may lie. A claim stores its lease's distance from the claim's own
time; a renewal raises the reach to its step if that is further. So a live lease never lies
further than its reach from now, and a delivery that meets the claim judges it by that
(``worker.delivery.calls``), not by its own settings: a fleet being rolled to a larger
``lease_margin_s`` or ``deadline_ceiling_s`` shares the ledger with one that has smaller ones.
A reach is only trusted up to ``MAX_REACH_S``, the furthest any settings can make it, so a
damaged row is still not waited for for ever. A row written before the reach was kept
(NULL) keeps NULL: a renewal alone cannot say how far its claim put the lease.

SQLite stores UTC as fixed-width text (``worker.ledger.models.UTCDateTime``:
``YYYY-MM-DD HH:MM:SS.ffffff``); its ``strftime('%f')`` gives milliseconds, padded here to
that width so that the text comparisons stay in time order.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared.setting_types import MAX_SECONDS

__all__ = ["MAX_REACH_S", "claim_reach", "renew_lease", "trusted_reach"]

#: The furthest past its write any settings can put a lease: a claim's is its deadline, at
#: most ``deadline_ceiling_s`` away, plus ``lease_margin_s``, each at most ``MAX_SECONDS``
#: (``shared.setting_types``); a renewal's step is the margin or a few seconds.
MAX_REACH_S: Final = 2.0 * MAX_SECONDS

# Raised to the renewal's step, never lowered; NULL stays NULL (NULL < x is not true).
_REACH = "lease_reach_s = CASE WHEN lease_reach_s < :seconds THEN :seconds ELSE lease_reach_s END"

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"
_SQLITE_LATER = "(strftime('%Y-%m-%d %H:%M:%f', 'now', :modifier) || '000')"

_RENEW = {
    "sqlite": text(
        f"UPDATE calls SET lease_expires = max(lease_expires, {_SQLITE_LATER}), {_REACH} "
        "WHERE job_id = :job_id AND step = :step AND status = 'claimed' "
        f"AND lease_expires >= {_SQLITE_NOW}"
    ),
    "postgresql": text(
        "UPDATE calls SET lease_expires = "
        "greatest(lease_expires, clock_timestamp() + make_interval(secs => :seconds)), "
        f"{_REACH} "
        "WHERE job_id = :job_id AND step = :step AND status = 'claimed' "
        "AND lease_expires >= clock_timestamp()"
    ),
}


def renew_lease(conn: Connection, *, job_id: str, step: str, extend_s: float) -> bool:
    """Extend the lease of the claimed call (job_id, step) to at least the database's now
    plus ``extend_s``; False (nothing changed) if it is not claimed or its lease ran out."""
    if extend_s <= 0:
        raise ValueError(f"a lease is extended by a positive time, not {extend_s}")
    dialect = conn.dialect.name
    statement = _RENEW.get(dialect)
    if statement is None:
        raise NotImplementedError(f"the ledger supports SQLite and PostgreSQL, not {dialect}")
    params = {
        "job_id": job_id,
        "step": step,
        "seconds": float(extend_s),
        "modifier": f"+{float(extend_s):.3f} seconds",
    }
    if dialect != "sqlite":
        del params["modifier"]
    return int(conn.execute(statement, params).rowcount) == 1


def claim_reach(lease_expires: datetime, now: datetime) -> float:
    """The reach a claim made at ``now`` under ``lease_expires`` stores: the seconds from one
    to the other (none for a lease already over)."""
    return max(0.0, (lease_expires - now).total_seconds())


def trusted_reach(stored: float) -> float | None:
    """A stored reach as a reader trusts it: never below none; None for one no settings can
    give (NaN, past ``MAX_REACH_S``): a damaged row, judged as one without a reach is. (An
    attack found the cap trusted: a lease five years off under a reach of NaN was waited for.)"""
    if math.isnan(stored) or stored > MAX_REACH_S:
        return None
    return max(stored, 0.0)
