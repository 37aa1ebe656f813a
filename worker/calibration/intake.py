"""From the label stream to the ledger: where reviewers' labels are stored.

A resolution appends its labels to ``keys.LABEL_STREAM`` in the Lua call that resolves it
(``shared.escalations``), so a reviewer's process (the console, ``decisions escalations``, a
producer using ``EscalationQueue``) needs no ledger. Every worker's reaper, and ``decisions
calibration`` before it reports, reads that stream through one consumer group: stores the
labels in the ledger (one transaction a page), then acknowledges and deletes the entries.
A crash between the two leaves the entries pending; they are read again (a consumer silent
for ``claim_idle_s`` has its entries taken over) and stored again, which changes nothing
(``worker.ledger.label_ops``). An entry that does not parse is logged and dropped: it can
never become a label, and must not hold back the others. That includes a label out of its
bounds (``shared.labels.Label``: a NaN or infinite weight, a probability of 1.5), logged with
the fields it broke; the entry is one resolution, so its other labels go with it. Nor may an
entry whose labels the ledger refuses (a row its constraints or its driver reject: text
PostgreSQL cannot hold): the page is then stored entry by entry, and the entries refused are
logged (their id and the error's type, never a label's contents) and dropped. An outage
(``LedgerError``) drops nothing: it is raised with every entry of the page left pending.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from typing import Any

import redis
import structlog
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc

from shared import keys
from shared.labels import Label, refused_fields
from shared.limits import MAX_ID_CHARS
from worker.ledger import Ledger
from worker.ledger.label_ops import Resolved

__all__ = ["consumer_name", "store_label_stream"]

log = structlog.get_logger("decisions.calibration")

Found = tuple[Label, datetime, str | None]
#: What one label stream entry carries: its labels, and the resolution they came with.
Parsed = tuple[list[Found], Resolved | None]

# What the ledger raises for a row it will never store, whatever the retry: a constraint or a
# value the database refuses (DataError, IntegrityError), or text its driver cannot encode
# (a lone surrogate: UnicodeEncodeError, a ValueError). An outage is a LedgerError: not here.
_REFUSED = (sa_exc.DataError, sa_exc.IntegrityError, ValueError)


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def store_label_stream(
    ledger: Ledger,
    client: redis.Redis,
    *,
    consumer: str | None = None,
    stream: str = keys.LABEL_STREAM,
    group: str = keys.LABEL_GROUP,
    page: int = 500,
    claim_idle_s: float = 60.0,
) -> int:
    """Store every label waiting on the stream; returns how many were new in the ledger.
    A ledger error is raised with the entries left pending (stored by a later call)."""
    consumer = consumer or consumer_name()
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    stored = 0
    # Entries a silent consumer (a worker that died mid-page) held, then this one's own
    # pending entries, then new ones.
    claimed: Any = client.xautoclaim(
        stream, group, consumer, int(claim_idle_s * 1000), "0-0", count=page
    )
    stored += _store(ledger, client, stream, group, claimed[1])
    for start in ("0", ">"):
        while True:
            got: Any = client.xreadgroup(group, consumer, {stream: start}, count=page)
            entries = got[0][1] if got else []
            if not entries:
                break
            stored += _store(ledger, client, stream, group, entries)
            if start == "0" and len(entries) < page:
                break
    return stored


def _store(
    ledger: Ledger, client: redis.Redis, stream: str, group: str, entries: list[Any]
) -> int:
    found: dict[str, Parsed] = {}
    for entry_id, fields in entries:
        name = _text(entry_id)
        # No fields: the entry is gone (another consumer stored and deleted it meanwhile).
        # Acknowledged with the others all the same, or it would stay pending here for good.
        found[name] = _parse(name, fields) if fields else ([], None)
    stored = _store_page(ledger, found)
    if found:
        pipe = client.pipeline(transaction=False)
        pipe.xack(stream, group, *found)
        pipe.xdel(stream, *found)
        pipe.execute()
    return stored


def _store_page(ledger: Ledger, found: dict[str, Parsed]) -> int:
    """Store the labels of a page of entries, in one transaction while the ledger takes them
    all; a LedgerError is raised as it is (nothing is acknowledged then)."""
    labels = [item for items, _ in found.values() for item in items]
    resolved = [resolution for _, resolution in found.values() if resolution is not None]
    if not labels and not resolved:
        return 0
    try:
        return ledger.store_labels(labels, resolved)
    except _REFUSED:
        # Some entry's rows were refused, and nothing of the page was stored: find which
        # below, outside this ``except`` so that an outage raised there does not carry the
        # refusal (its SQL parameters are the labels' contents) as its context.
        pass
    stored = 0
    for entry_id, (items, resolution) in found.items():
        if not items and resolution is None:
            continue
        try:
            stored += ledger.store_labels(items, [resolution] if resolution else [])
        except _REFUSED as exc:
            log.warning("labels.dropped", entry=entry_id, why=type(exc).__name__)
    return stored


def _parse(entry_id: str, raw: dict[Any, Any]) -> Parsed:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    resolution: Resolved | None = None
    labels: list[Label] = []
    try:
        at = datetime.fromtimestamp(int(fields["resolved_at_ms"]) / 1000, UTC)
        job_id = fields["job_id"]
        if not job_id or len(job_id) > MAX_ID_CHARS:
            raise ValueError("job_id is not a job id")
        # The resolution stands whatever its labels are: its job was resolved.
        reviewer = fields.get("reviewer", "")[:MAX_ID_CHARS]
        resolution = (job_id, reviewer, at, fields.get("entry_id"))
        items = json.loads(fields["labels"])
        if not isinstance(items, list):
            raise ValueError("labels is not a list")
        labels = [Label.model_validate(item) for item in items]
    # A time past what datetime holds is OverflowError or OSError (the platform's gmtime),
    # labels nested deeper than the parser goes RecursionError: none a ValueError.
    except (KeyError, ValueError, ValidationError, OverflowError, OSError, RecursionError) as exc:
        # The fields a label broke say why (a weight out of bounds), never their values.
        named = {"fields": refused_fields(exc)} if isinstance(exc, ValidationError) else {}
        log.warning("labels.skipped", entry=entry_id, why=type(exc).__name__, **named)
        return [], resolution
    escalation_entry = fields.get("entry_id")
    if not resolution[1] and labels:
        # An entry an older version wrote names no reviewer: its labels' own.
        resolution = (job_id, labels[0].reviewer, at, escalation_entry)
    return [(label, at, escalation_entry) for label in labels], resolution


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
