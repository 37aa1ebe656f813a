"""An escalation for a call whose stored outcome cannot be read says which call, on every kind.

The job escalates ``decision_interrupted`` (``test_damaged_call_rows``,
``test_damaged_menu_rows``); a person then has to find the row: the detail names the call
(``job id/step``), not the generic "a delivery was interrupted" of a call whose outcome was
never recorded, which would send them looking for a crash that did not happen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.replies import EscalationMessage
from tests.judgments.support import route_job, sift_job, verified_job
from tests.unit.test_damaged_call_rows import Env, decide_job
from worker.kinds.decide import DECIDE_STEP

NOT_JSON = "not json{"


@pytest.fixture
def env(ledger_url: str) -> Iterator[Env]:
    judgments = Env(ledger_url)
    yield judgments
    judgments.close()


def redelivered(env: Env, job: dict[str, Any], step: str) -> EscalationMessage:
    """``job`` run to its end, then delivered again with ``step``'s stored outcome damaged
    (as a delivery that died before the terminal message was stored left it)."""
    env.run(job)
    sent = env.faux.total()
    env.unfinish(job["id"])
    env.sql(
        "UPDATE calls SET outcome_json = :v WHERE job_id = :j AND step = :s",
        v=NOT_JSON, j=job["id"], s=step,
    )  # fmt: skip
    assert env.run(job) == "escalation"
    assert env.faux.total() == sent  # never sent again
    [published] = env.sink.snapshot()
    message = env.last()
    assert published.job_id == job["id"] and message.reason == "decision_interrupted"
    return message


def test_a_decide_job_names_the_call_it_cannot_read(env: Env) -> None:
    message = redelivered(env, decide_job("d"), DECIDE_STEP)
    assert message.detail.startswith(f"the stored outcome of call d/{DECIDE_STEP} cannot be read")
    assert "a delivery was interrupted" not in message.detail


def test_a_sift_job_names_the_call_it_cannot_read(env: Env) -> None:
    message = redelivered(env, sift_job("s", ["one", "two"]), "sift.0")
    assert "the stored outcome of call s/sift.0 cannot be read" in message.detail
    assert "was interrupted with the request possibly sent" not in message.detail


def test_a_route_job_names_the_call_it_cannot_read(env: Env) -> None:
    message = redelivered(env, route_job("r"), "route")
    assert "the stored outcome of call r/route cannot be read" in message.detail


def test_a_verified_decide_job_names_the_verifying_call_it_cannot_read(env: Env) -> None:
    message = redelivered(
        env, verified_job("v", "A parcel is late.", model="typesafe/jev-1.14"), "verify.0"
    )
    assert "the stored outcome of call v/verify.0 cannot be read" in message.detail


def test_an_interrupted_call_keeps_its_own_detail(env: Env) -> None:
    # Not every decision_interrupted is an unreadable row: one whose outcome was never known.
    env.run(decide_job("u"))
    env.unfinish("u")
    env.sql("UPDATE calls SET status = 'unknown', outcome_json = NULL WHERE job_id = 'u'")
    assert env.run(decide_job("u")) == "escalation"
    message = env.last()
    assert message.reason == "decision_interrupted"
    assert message.detail.startswith("a delivery was interrupted with the request possibly sent")
