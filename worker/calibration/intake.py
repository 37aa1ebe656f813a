"""From the label stream to the ledger: where reviewers' labels are stored.

A resolution appends its labels to ``keys.LABEL_STREAM`` in the Lua call that resolves it
(``shared.escalations``), so a reviewer's process (the console, ``decisions escalations``, a
producer using ``EscalationQueue``) needs no ledger. Every worker's reaper, and ``decisions
calibration`` before it reports, reads that stream through one consumer group: stores the
labels in the ledger (one transaction a page), then acknowledges and deletes the entries.
A crash between the two leaves the entries pending; they are read again (a consumer silent
for ``claim_idle_s`` has its entries taken over) and stored again, which changes nothing
(``worker.ledger.label_ops``). An entry that does not parse is logged and dropped: it can
never become a label, and must not hold back the others.
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

from shared import keys
from shared.labels import Label
from worker.ledger import Ledger

__all__ = ["consumer_name", "store_label_stream"]

log = structlog.get_logger("decisions.calibration")

Found = tuple[Label, datetime, str | None]


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
    found: list[Found] = []
    done: list[str] = []
    for entry_id, fields in entries:
        if fields is None:  # deleted meanwhile (another consumer stored it)
            continue
        name = _text(entry_id)
        done.append(name)
        found.extend(_parse(name, fields))
    stored = ledger.store_labels(found) if found else 0
    if done:
        pipe = client.pipeline(transaction=False)
        pipe.xack(stream, group, *done)
        pipe.xdel(stream, *done)
        pipe.execute()
    return stored


def _parse(entry_id: str, raw: dict[Any, Any]) -> list[Found]:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    try:
        at = datetime.fromtimestamp(int(fields["resolved_at_ms"]) / 1000, UTC)
        items = json.loads(fields["labels"])
        if not isinstance(items, list):
            raise ValueError("labels is not a list")
        labels = [Label.model_validate(item) for item in items]
    except (KeyError, ValueError, ValidationError) as exc:
        log.warning("labels.skipped", entry=entry_id, why=type(exc).__name__)
        return []
    return [(label, at, fields.get("entry_id")) for label in labels]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
