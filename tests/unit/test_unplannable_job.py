"""A job whose plan fails with an unexpected error is rejected alone; its chunk goes on.

Such an error is a bug (a crafted image header reached one, through Pillow), but it raised
out of ``validate`` and ended the chunk's task: no job of the chunk got a terminal message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import worker.kinds.decide as decide_kind
from shared.replies import parse_reply
from shared.settings import Settings
from tests.support.runners import faux_runner
from worker.ledger import Ledger


def _job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "reply_to": "r",
        "state": "A customer writes: where is my parcel?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }


def test_an_unplannable_job_is_rejected_and_the_rest_of_its_chunk_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = decide_kind.prepare_decide

    def failing(job: Any, providers: Any) -> Any:
        if job.id == "bad":
            raise RuntimeError("a bug in planning")
        return real(job, providers)

    monkeypatch.setattr(decide_kind, "prepare_decide", failing)
    settings = Settings(_env_file=None, ledger_url=f"sqlite:///{tmp_path / 'l.db'}", faux_url=None)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    runner, faux, sink = faux_runner(settings, ledger)
    try:
        types = asyncio.run(runner.run_chunk([_job("good-1"), _job("bad"), _job("good-2")]))
    finally:
        ledger.dispose()
    assert sorted(types) == ["rejected", "result", "result"]
    replies = {r.job_id: r for r in (parse_reply(p.message) for p in sink.snapshot())}
    assert replies["bad"].type == "rejected"
    (problem,) = replies["bad"].problems
    assert problem["field"] == "(job)"
    assert "RuntimeError" in problem["message"] and "a bug in planning" not in problem["message"]
    assert replies["good-1"].type == replies["good-2"].type == "result"
    assert sum(faux.requests().values()) == 2
