"""Renewing a call's lease while its holder provably still works on it (a heartbeat).

A call's lease (``lease_expires``) says until when its claim belongs to a live delivery; past
it, a reaper or a duplicate delivery books the call ``unknown`` and escalates. Work that
cannot be bounded by the job's deadline (a menu handler runs arbitrary code in a thread)
renews the lease while it runs, so that a live one is never taken for dead.

Renewing is one conditional UPDATE, judged by the database's own clock (never a worker's):
it only touches a call that is still ``claimed`` and whose lease has not run out, and it only
ever moves the lease later. A renewal that changes no row means the claim is no longer the
holder's (a reaper expired it): the holder must stop (``worker.delivery.leased``).

SQLite stores UTC as fixed-width text (``worker.ledger.models.UTCDateTime``:
``YYYY-MM-DD HH:MM:SS.ffffff``); its ``strftime('%f')`` gives milliseconds, padded here to
that width so that the text comparisons stay in time order.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

__all__ = ["renew_lease"]

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"
_SQLITE_LATER = "(strftime('%Y-%m-%d %H:%M:%f', 'now', :modifier) || '000')"

_RENEW = {
    "sqlite": text(
        f"UPDATE calls SET lease_expires = max(lease_expires, {_SQLITE_LATER}) "
        "WHERE job_id = :job_id AND step = :step AND status = 'claimed' "
        f"AND lease_expires >= {_SQLITE_NOW}"
    ),
    "postgresql": text(
        "UPDATE calls SET lease_expires = "
        "greatest(lease_expires, clock_timestamp() + make_interval(secs => :seconds)) "
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
    if dialect == "sqlite":
        del params["seconds"]
    else:
        del params["modifier"]
    return int(conn.execute(statement, params).rowcount) == 1
