"""``decisions budget resume`` with a stored job that cannot be read: that job is named, one
line, and left as it was; the batch's other jobs are reopened and submitted again, also when a
resume that crashed before left them all reopened."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from shared import keys
from shared.errors import EscalationNotFound
from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from tests.cli.support import Outcome, decisions, traceback_in
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database, redis_url
from worker.ledger import Ledger

REDIS_DB = 14
BATCH = "bb"
POISON, GOOD = "a-poison", "b-good"


def _exhausted_batch(url: str, *, reopened: bool = False) -> Ledger:
    """Two jobs of ``BATCH`` that escalated ``budget_exhausted``, one whose stored job is cut
    short; ``reopened``: as a resume that crashed after its reopen left them."""
    ledger = Ledger(url)
    ledger.migrate()
    for job_id in (POISON, GOOD):
        open_batch_job(ledger, job_id)
    with ledger.engine.begin() as conn:
        if reopened:
            conn.execute(sa.text("UPDATE jobs SET resumes = 1"))
        else:
            conn.execute(
                sa.text(
                    "UPDATE jobs SET terminal_type = 'escalation', "
                    "terminal_reason = 'budget_exhausted', terminal_message = '{}', "
                    "finished_at = created_at, published_at = created_at"
                )
            )
        cut = sa.text("UPDATE jobs SET job_json = '{trunc' WHERE job_id = :j")
        conn.execute(cut, {"j": POISON})
    return ledger


def open_batch_job(ledger: Ledger, job_id: str) -> None:
    """Open a decide job of ``BATCH`` as a worker would, its job stored whole."""
    job = parse_job(
        {
            "id": job_id, "batch": BATCH, "reply_to": "r", "state": "s",
            "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        }
    )  # fmt: skip
    ledger.open_job(
        job_id=job_id, kind="decide", batch=BATCH, reply_to="r",
        fingerprint=job_fingerprint(job), deadline=datetime.now(UTC) + timedelta(60),
        job_json=job.model_dump_json(),
    )  # fmt: skip


def queued_ids(r: redis.Redis) -> list[str]:
    """The job ids of the messages on the worker's queue."""
    ids = []
    for raw in r.lrange(keys.CELERY_QUEUE, 0, -1):
        envelope = json.loads(raw)
        body = json.loads(base64.b64decode(envelope["body"]))
        ids += [job["id"] for job in body[1]["jobs"]]
    return sorted(ids)


def _resume(tmp_path: Path, url: str) -> Outcome:
    return decisions(
        "budget", "resume", BATCH, cwd=tmp_path, ledger_url=url,
        redis_url=redis_url(REDIS_DB), broker_url=redis_url(REDIS_DB),
    )  # fmt: skip


def _check(done: Outcome, ledger: Ledger, r: redis.Redis) -> None:
    assert traceback_in(done.output) is None, done.output
    assert "unexpected error" not in done.output, done.output
    assert done.code == 1, done.output
    assert [line for line in done.stderr.splitlines() if POISON in line] == [
        f"{POISON}: left as it is, its stored job cannot be read (not JSON)"
    ]
    assert "resumed 1 job(s)" in done.stdout
    assert queued_ids(r) == [GOOD]
    good = ledger.get_job(GOOD)
    assert good is not None and not good.finished and good.resumes == 1


def test_a_job_that_cannot_be_read_is_left_and_the_others_are_resumed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = _exhausted_batch(url)
    with redis_database(REDIS_DB) as r:
        done = _resume(tmp_path, url)
        _check(done, ledger, r)
        poison = ledger.get_job(POISON)
        assert poison is not None and poison.terminal_reason == "budget_exhausted"
        assert poison.resumes == 0 and poison.job_json == "{trunc"
        # Run again after a resume interrupted before it queued them (its reopen committed,
        # no message, no intake record): the same, nothing else.
        r.delete(keys.CELERY_QUEUE, keys.INTAKE_JOBS, keys.INTAKE_TIMES)
        _check(_resume(tmp_path, url), ledger, r)


def test_a_batch_a_crashed_resume_left_reopened_is_resumed_but_the_unreadable_job(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = _exhausted_batch(url, reopened=True)
    with redis_database(REDIS_DB) as r:
        _check(_resume(tmp_path, url), ledger, r)
        poison = ledger.get_job(POISON)
        assert poison is not None and poison.resumes == 1 and not poison.finished


def test_a_resumed_jobs_escalation_leaves_the_reviewers_queue(tmp_path: Path) -> None:
    """Left there, a reviewer could resolve it after the resume: a resolution for a job the
    resumed run also answers. The unreadable job, not resumed, keeps its escalation."""
    from shared.escalations import EscalationQueue
    from shared.streams import publish_once

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = _exhausted_batch(url)
    with redis_database(REDIS_DB) as r:
        for job_id in (POISON, GOOD):
            publish_once(
                r, stream="r", job_id=job_id, message_type="escalation",
                message_json=exhausted_message(job_id), escalation=True,
            )  # fmt: skip
        queue = EscalationQueue(r)
        held = queue.claim("ann")
        assert held is not None
        _check(_resume(tmp_path, url), ledger, r)
        assert [item.message.job_id for item in open_escalations(queue)] == [POISON]
        if held.message.job_id == GOOD:
            with pytest.raises(EscalationNotFound):
                queue.resolve(held.entry_id, "ann", {"q": True})


def test_a_job_resolved_before_the_resume_is_left_alone(tmp_path: Path) -> None:
    from shared.escalations import EscalationQueue
    from shared.streams import publish_once

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = _exhausted_batch(url)
    with redis_database(REDIS_DB) as r:
        publish_once(
            r, stream="r", job_id=GOOD, message_type="escalation",
            message_json=exhausted_message(GOOD), escalation=True,
        )  # fmt: skip
        queue = EscalationQueue(r)
        held = queue.claim("ann")
        assert held is not None
        queue.resolve(held.entry_id, "ann", {"q": True})
        done = _resume(tmp_path, url)
        assert "resumed 0 job(s)" in done.stdout, done.output
        assert "1 resolved by a reviewer left alone" in done.stdout, done.output
        assert queued_ids(r) == []
        good = ledger.get_job(GOOD)
        assert good is not None and good.finished and good.resumes == 0


def exhausted_message(job_id: str) -> str:
    from shared.verdicts import escalation

    job = parse_job(
        {
            "id": job_id, "batch": BATCH, "reply_to": "r", "state": "s",
            "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        }
    )  # fmt: skip
    return escalation(job, "budget_exhausted", "spent", []).to_json()
