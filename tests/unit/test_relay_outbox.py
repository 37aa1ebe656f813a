"""The outbox relay goes on past a message its stream refuses: one stuck reply (a key that
is not a stream) must not hold back every later relay, round after round."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.errors import PublishFailed
from worker.recovery.reaper import OUTBOX_GRACE_S, relay_outbox


class Row:
    def __init__(self, job_id: str, finished_at: datetime) -> None:
        self.job_id = job_id
        self.finished_at = finished_at
        self.terminal_type = "result"
        self.job_json = json.dumps({"id": job_id})


class Ledger:
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def unpublished(self) -> list[Row]:
        return self.rows


class Runner:
    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.ran: list[str] = []

    async def run_one(self, raw: dict[str, Any]) -> str:
        self.ran.append(raw["id"])
        if raw["id"] in self.refused:
            raise PublishFailed(f"stream refused {raw['id']}")
        return "result"


def test_a_refused_publish_does_not_stop_the_relay() -> None:
    now = datetime.now(UTC)
    old = now - timedelta(seconds=OUTBOX_GRACE_S + 5)
    rows = [Row("stuck", old), Row("next", old), Row("fresh", now)]
    runner = Runner(refused={"stuck"})
    relayed = asyncio.run(relay_outbox(Ledger(rows), runner, now=now))  # type: ignore[arg-type]
    assert runner.ran == ["stuck", "next"]
    assert relayed == 1
