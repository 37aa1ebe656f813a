"""The plugin's fixtures in this project's own run: rejections, per-job failure modes, the
reply and escalation streams, settings a conftest overrides, and placeholder keys."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from shared.settings import Settings
from worker.testing import (
    DecisionsWorker,
    FauxBehaviourControl,
    FauxHandle,
    ReplyStream,
    RequestCounts,
)
from worker.testing.faux.outcome import Outcome


def ticket(job_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "decide",
        "state": f"ticket {job_id}: my payouts fail",
        "questions": {"is_urgent": {"type": "noul", "instructions": "Urgent?"}},
        **extra,
    }


def test_each_job_gets_its_own_failure_and_its_own_message(
    decisions_worker: DecisionsWorker,
    faux_behaviour: FauxBehaviourControl,
    faux_counts: RequestCounts,
    reply_stream: ReplyStream,
) -> None:
    faux_behaviour.for_job("t-lost", mode="drop_after_read")
    faux_behaviour.for_job("t-busy", mode="rate_limit")
    bad = {"id": "t-bad", "kind": "decide", "state": "x", "questions": {}}
    replies = decisions_worker.submit(
        [ticket("t-ok"), ticket("t-lost"), ticket("t-busy"), bad], reply_to="tickets"
    )
    assert list(replies) == ["t-ok", "t-lost", "t-busy", "t-bad"]
    assert replies["t-ok"].type == "result"
    assert replies["t-lost"].reason == "decision_interrupted"  # type: ignore[union-attr]
    assert replies["t-busy"].type == "escalation"
    assert replies["t-bad"].type == "rejected"
    assert faux_counts.by_call() == {"t-ok/decide": 1, "t-lost/decide": 1, "t-busy/decide": 1}
    assert reply_stream.streams() == ["tickets"]
    assert reply_stream.read() == [], "the default stream got nothing"
    assert {r.job_id for r in reply_stream.read("tickets")} == set(replies)
    assert {e.job_id for e in reply_stream.escalations()} == {"t-lost", "t-busy"}
    assert reply_stream.of("t-bad") == replies["t-bad"]


def test_a_behaviour_for_every_request_and_its_reset(
    decisions_worker: DecisionsWorker,
    faux_behaviour: FauxBehaviourControl,
    faux_counts: RequestCounts,
) -> None:
    faux_behaviour(mode="refuse")
    assert decisions_worker.submit([ticket("a")])["a"].reason == "decision_refused"  # type: ignore[union-attr]
    faux_behaviour.reset()
    assert decisions_worker.submit([ticket("b")])["b"].type == "result"
    assert faux_counts.total == 2 and faux_counts.for_job("a") == 1


class TestOverriddenSettings:
    @pytest.fixture
    def decisions_settings(self, decisions_settings: Settings) -> Settings:
        return decisions_settings.model_copy(update={"default_provider": "typesafe"})

    def test_a_conftest_can_change_a_setting(
        self, decisions_worker: DecisionsWorker, faux_counts: RequestCounts
    ) -> None:
        reply = decisions_worker.submit([ticket("ts")])["ts"]
        assert reply.type == "result"
        assert reply.receipts[0].provider == "typesafe"
        assert faux_counts.total == 1


def test_a_real_key_in_the_environment_is_never_sent_to_the_faux(
    monkeypatch: pytest.MonkeyPatch, faux_server: FauxHandle, request: pytest.FixtureRequest
) -> None:
    canary = f"sk-canary-{uuid.uuid4()}"
    monkeypatch.setenv("OPENROUTER_API_KEY", canary)
    seen: list[str] = []
    handle = faux_server.provider.handle_async

    async def spy(
        method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
        body: bytes, admission: Any = None,
    ) -> Outcome:
        seen.append(" ".join(f"{k}: {v}" for k, v in headers.items()))
        return await handle(method, path, query, headers, body, admission)

    monkeypatch.setattr(faux_server.provider, "handle_async", spy)
    worker: DecisionsWorker = request.getfixturevalue("decisions_worker")
    job = ticket("or", provider="openrouter", model="typesafe/jev-1.14")
    assert worker.submit([job])["or"].type == "result"
    assert len(seen) == 1 and "authorization: bearer faux-placeholder" in seen[0].lower()
    assert canary not in seen[0]


def test_a_line_without_an_id_comes_back_under_its_rejection_id(
    decisions_worker: DecisionsWorker,
) -> None:
    replies = decisions_worker.submit([ticket("fine"), {"kind": "decide", "state": "no id"}])
    [rejected_id] = [job_id for job_id in replies if job_id != "fine"]
    assert rejected_id.startswith("invalid-") and replies[rejected_id].type == "rejected"
    assert replies["fine"].type == "result"


def test_one_worker_at_a_time(decisions_worker: DecisionsWorker) -> None:
    with pytest.raises(RuntimeError, match="another DecisionsWorker is running"):
        DecisionsWorker(decisions_worker.settings).__enter__()
