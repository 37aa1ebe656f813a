"""``decisions run`` never waits forever: a task that fails ends the run with its error (which
the command's handler then explains), and a bad default provider stops it before any job."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ConfigurationError
from shared.settings import Settings
from worker.embedded import run_batch
from worker.kinds.dispatch import Runner

JOB = {"id": "j-1", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}


def _settings(tmp_path: Path, **update: Any) -> Settings:
    return Settings(ledger_url=f"sqlite:///{tmp_path / 'decisions.db'}", **update)


def test_a_failing_task_ends_the_run_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Runner, jobs: list[Any]) -> list[str]:
        raise RuntimeError("the runner broke")

    monkeypatch.setattr(Runner, "run_chunk", broken)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the runner broke"):
        # The old wait ran until this deadline, then blamed the jobs.
        run_batch([JOB], settings=_settings(tmp_path), out_dir=tmp_path / "out", timeout_s=60)
    assert time.monotonic() - started < 30


def test_an_unknown_default_provider_stops_the_run_before_any_job(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="DECISIONS_DEFAULT_PROVIDER='bogus'"):
        run_batch(
            [JOB],
            settings=_settings(tmp_path, default_provider="bogus"),
            out_dir=tmp_path / "out",
            timeout_s=60,
        )
