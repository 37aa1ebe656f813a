"""``decisions budget resume`` runs again only jobs whose escalation it took out of the
reviewers' queue, and never one the ledger knows a reviewer resolved. Found by an attack:

- a job that escalated ``budget_exhausted`` while the resume ran (the batch still running,
  as when an operator raises a budget and resumes) was reopened with its escalation still
  open: a reviewer's resolution and the resumed run's terminal message, two answers;
- so was a job whose ledger row was written before the resume and whose escalation was
  published just after the withdrawal (a worker writes the ledger, then publishes);
- a job a reviewer resolved, which the ledger had heard of, was run again once the streams
  Redis had lost its resolved record (a restore, a lost AOF).

The withdrawal is where the race is: these tests finish or publish a job from inside it, as a
worker would between the resume's read and its reopen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from typer.testing import CliRunner

from shared import keys
from shared.escalations import EscalationQueue
from shared.settings import get_settings
from shared.streams import publish_once
from tests.cli.test_budget_resume import BATCH, exhausted_message, open_batch_job, queued_ids
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database, redis_url
from worker.cli import app
from worker.cli import budget as budget_cli
from worker.ledger import Ledger

REDIS_DB = 14


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("DECISIONS_LEDGER_URL", url)
    monkeypatch.setenv("DECISIONS_REDIS_URL", redis_url(REDIS_DB))
    monkeypatch.setenv("DECISIONS_BROKER_URL", redis_url(REDIS_DB))
    get_settings.cache_clear()
    found = Ledger(url)
    found.migrate()
    yield found
    found.dispose()
    get_settings.cache_clear()


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def exhaust(ledger: Ledger, job_id: str, *, published: bool) -> None:
    """The job's row as a worker leaves it: escalated, and (``published``) marked published."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET terminal_type = 'escalation', "
                "terminal_reason = 'budget_exhausted', terminal_message = '{}', "
                "finished_at = created_at"
                + (", published_at = created_at" if published else "")
                + " WHERE job_id = :j"
            ),
            {"j": job_id},
        )


def publish(r: redis.Redis, job_id: str) -> None:
    publish_once(
        r, stream="r", job_id=job_id, message_type="escalation",
        message_json=exhausted_message(job_id), escalation=True,
    )  # fmt: skip


def during_withdrawal(monkeypatch: pytest.MonkeyPatch, step: Callable[[], None]) -> None:
    real = budget_cli.withdraw_escalations

    def racing(client: Any, job_ids: Any, **kwargs: Any) -> Any:
        ids = list(job_ids)
        step()
        return real(client, ids, **kwargs)

    monkeypatch.setattr(budget_cli, "withdraw_escalations", racing)


def resume() -> str:
    done = CliRunner().invoke(app, ["budget", "resume", BATCH])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return " ".join(done.output.split())  # as one line, however the terminal wrapped it


def open_for_reviewers(r: redis.Redis) -> list[str]:
    return sorted(item.message.job_id for item in open_escalations(EscalationQueue(r)))


def test_a_job_that_escalates_during_the_resume_keeps_its_escalation_and_waits(
    ledger: Ledger, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    for job_id in ("a-first", "b-late"):
        open_batch_job(ledger, job_id)
    exhaust(ledger, "a-first", published=True)
    publish(r, "a-first")

    def worker_escalates() -> None:
        exhaust(ledger, "b-late", published=True)
        publish(r, "b-late")

    during_withdrawal(monkeypatch, worker_escalates)
    said = resume()
    assert "resumed 1 job(s)" in said, said
    assert queued_ids(r) == ["a-first"]
    assert open_for_reviewers(r) == ["b-late"]
    late = ledger.get_job("b-late")
    assert late is not None and late.terminal_reason == "budget_exhausted" and late.resumes == 0
    assert "run it again" in said, said  # the operator is told one is left
    # The next resume takes it, as any other.
    monkeypatch.undo()
    monkeypatch.setenv("DECISIONS_LEDGER_URL", str(ledger.engine.url))
    monkeypatch.setenv("DECISIONS_REDIS_URL", redis_url(REDIS_DB))
    monkeypatch.setenv("DECISIONS_BROKER_URL", redis_url(REDIS_DB))
    said = resume()
    assert "resumed 1 job(s)" in said and "1 already queued" in said, said  # a-first's is
    assert queued_ids(r) == ["a-first", "b-late"] and open_for_reviewers(r) == []


def test_a_job_whose_escalation_is_not_yet_published_is_left_for_the_next_resume(
    ledger: Ledger, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_batch_job(ledger, "a-slow")
    exhaust(ledger, "a-slow", published=False)  # written; the worker's publish comes after
    during_withdrawal(monkeypatch, lambda: publish(r, "a-slow"))
    said = resume()
    assert "resumed 0 job(s)" in said, said
    assert queued_ids(r) == [] and open_for_reviewers(r) == ["a-slow"]
    row = ledger.get_job("a-slow")
    assert row is not None and row.finished and row.resumes == 0
    assert "run it again" in said, said


def test_a_resolution_the_ledger_knows_keeps_the_job_from_running_again(
    ledger: Ledger, r: redis.Redis
) -> None:
    open_batch_job(ledger, "a-done")
    exhaust(ledger, "a-done", published=True)
    publish(r, "a-done")
    queue = EscalationQueue(r)
    held = queue.claim("ann")
    assert held is not None
    queue.resolve(held.entry_id, "ann", {"q": True})
    # What a reaper stores from the label stream.
    ledger.store_labels([], [("a-done", "ann", datetime.now(UTC), held.entry_id)])
    assert ledger.resolved("a-done")
    r.delete(keys.resolved_record("a-done"))  # the streams Redis lost it
    said = resume()
    assert "resumed 0 job(s)" in said and "1 resolved by a reviewer left alone" in said, said
    assert queued_ids(r) == []
    row = ledger.get_job("a-done")
    assert row is not None and row.finished and row.resumes == 0


def test_a_second_resume_leaves_the_jobs_the_first_queued(ledger: Ledger, r: redis.Redis) -> None:
    """Found by two attacks: two resumes at once both said "resumed 14 job(s)" and queued each
    job twice (the second took the first's reopened jobs for an interrupted resume's). A job
    whose intake record is there is queued or running: the second resume leaves it."""
    for job_id in ("a-one", "b-two"):
        open_batch_job(ledger, job_id)
        exhaust(ledger, job_id, published=True)
        publish(r, job_id)
    assert "resumed 2 job(s)" in resume()
    said = resume()
    assert "resumed 0 job(s)" in said and "2 already queued" in said, said
    assert queued_ids(r) == ["a-one", "b-two"]
