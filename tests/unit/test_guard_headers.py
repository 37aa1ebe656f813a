"""The guard (``worker.process.guard``) in process: what it says when Celery's own handling
of a message raises after the guard let it through (the message is refused rather than the
worker stopped, and the one line names the jobs it drops, for an operator to submit again:
found by an attack, a header Celery choked on dropped readable jobs with no word of which);
and the headers Celery reads that it makes harmless (``disarm``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.exceptions import InvalidTaskError
from structlog.testing import capture_logs

from tests.support.fleet import decide_job
from worker.process import guard


def test_a_message_celery_cannot_handle_is_refused_naming_its_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def choking(*_: Any, **__: Any) -> Any:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(guard, "default", lambda *a, **k: choking)
    task = SimpleNamespace(name="decisions.run_jobs", retry_backoff_max=30)
    handler = guard.checked_strategy(task, SimpleNamespace(), SimpleNamespace())
    jobs = [decide_job("dropped-1"), decide_job("dropped-2")]
    message = SimpleNamespace(
        headers={"id": "t-1", "task": "decisions.run_jobs"},
        payload=[[], {"jobs": jobs}, {}],
        body=b"",
    )
    with capture_logs() as logs, pytest.raises(InvalidTaskError):
        handler(message, None, None, None, None)
    [said] = [e for e in logs if e["event"] == "task.poison"]
    assert said["reason"] == "unexpected_error"
    assert "TypeError" in said["detail"]
    assert "jobs dropped: 'dropped-1', 'dropped-2'" in said["detail"]


@pytest.mark.parametrize("retries", ["1", None, -1, 0.5, True, [1]])
def test_a_retry_count_celery_cannot_count_with_is_reset(retries: Any) -> None:
    """Celery's retry of an outage adds one to ``retries`` and its backoff raises two to it:
    "1" or null made the retry raise (TypeError) instead of waiting its backoff."""
    headers: dict[str, Any] = {"id": "t-1", "retries": retries}
    guard.disarm(headers)
    assert headers["retries"] == 0


def test_a_retry_count_of_the_fleets_own_is_kept() -> None:
    headers: dict[str, Any] = {"id": "t-1", "retries": 3, "timelimit": [None, None]}
    guard.disarm(headers)
    assert headers == {"id": "t-1", "retries": 3, "timelimit": [None, None]}
