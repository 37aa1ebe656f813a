"""Tool calls are bounded per model reply and per job, by fields of the job schema; local
tool and handler runs are no requests and carry no cost (issue 15, defect 16)."""

from __future__ import annotations

from typing import Any

from shared.jobs import DEFAULT_TOOL_CALLS_PER_REPLY, MAX_TOOL_CALLS_PER_JOB, MenuJob
from shared.replies import EscalationMessage, ResultMessage
from tests.menus_worker import handlers
from tests.menus_worker.support import Harness, menu_job
from worker.testing.faux import FauxChatReply, FauxToolCall


def many_tool_calls(n: int, turn: int) -> FauxChatReply:
    return FauxChatReply(
        tool_calls=[
            FauxToolCall(name="t_lookup", arguments={"order_id": f"T{turn}-{i}"}) for i in range(n)
        ]
    )


def test_the_bounds_are_named_in_the_job_schema_with_defaults() -> None:
    work = MenuJob.model_json_schema()["$defs"]["MenuWork"]["properties"]
    assert work["max_tool_calls_per_reply"]["default"] == DEFAULT_TOOL_CALLS_PER_REPLY
    assert "max_tool_calls" in work


async def test_one_reply_with_200_tool_calls_runs_only_the_bound(harness: Harness) -> None:
    job: dict[str, Any] = menu_job(
        "b1",
        work={
            "tools": ["t_lookup"],
            "max_steps": 4,
            "max_tool_calls_per_reply": 3,
            "max_tool_calls": 5,
        },
    )
    harness.reply("b1", "turn.0", many_tool_calls(200, 0))
    harness.reply("b1", "turn.1", many_tool_calls(200, 1))
    harness.pick("b1", "turn.2", "escalate", {"team": "billing", "summary": "lost parcel"})

    assert await harness.run(job) == "result"

    runs = [r["order_id"] for r in handlers.runs_of("t_lookup")]
    assert runs == ["T0-0", "T0-1", "T0-2", "T1-0", "T1-1"]  # 3 a reply, 5 a job
    statuses = harness.call_statuses("b1")
    assert sorted(s for s in statuses if s.startswith("tool.")) == [
        "tool.0",
        "tool.1",
        "tool.2",
        "tool.200",
        "tool.201",
    ]
    result = harness.terminal("b1")
    assert isinstance(result, ResultMessage)
    # Only the three model turns were requests; the tool and handler runs cost nothing.
    status = harness.ledger.status()
    assert status.requests_sent == 3
    assert "unknown" not in status.cost_by_basis

    # Redelivered: every step replays, nothing runs again.
    assert await harness.run(job) == "result"
    assert len(handlers.runs_of("t_lookup")) == 5


def test_the_bounds_at_their_defaults_leave_a_jobs_fingerprint_as_it_was() -> None:
    from shared.canonical import digest_of
    from shared.fingerprint import job_fingerprint
    from shared.job_parsing import parse_job

    job = parse_job(menu_job("fp", work={"tools": ["t_lookup"]}))
    # As the job was fingerprinted before the bounds (and audit_rate and budget_usd, which
    # are not part of a fingerprint either) existed.
    before = job.model_dump(
        mode="json",
        exclude={
            "submitted_at", "deadline", "timeout_s", "reply_to", "pack", "audit_rate",
            "budget_usd",
        },
    )
    for name in ("max_tool_calls_per_reply", "max_tool_calls"):
        del before["work"][name]
    assert job_fingerprint(job) == digest_of(before)


async def test_a_reply_asking_for_more_tool_calls_than_any_job_may_run_ends_the_job(
    harness: Harness,
) -> None:
    # Found by an attack: a 3 MB reply of 57,000 calls to a tool that does not exist was
    # answered call by call, each answer carried on every later turn: requests of 68 MB
    # and 688 MB of memory for one job. No job may run more than MAX_TOOL_CALLS_PER_JOB
    # calls, so a reply asking for more is no reply to go on from.
    job: dict[str, Any] = menu_job("h1", work={"tools": ["t_lookup"], "max_steps": 4})
    harness.reply("h1", "turn.0", many_tool_calls(MAX_TOOL_CALLS_PER_JOB + 1, 0))
    harness.pick("h1", "turn.1", "escalate", {"team": "billing", "summary": "lost parcel"})

    assert await harness.run(job) == "escalation"
    assert handlers.runs_of("t_lookup") == []
    assert harness.ledger.status().requests_sent == 1
    escalation = harness.terminal("h1")
    assert isinstance(escalation, EscalationMessage)
    assert f"at most {MAX_TOOL_CALLS_PER_JOB}" in (escalation.detail or "")


async def test_a_conversation_that_grows_past_its_bound_ends_before_the_next_request(
    harness: Harness,
) -> None:
    # Found by an attack on the count bound: 256 calls of 15.6 KB arguments a reply grew
    # every request by 4 MB a turn, to 125 MB by turn 32 (669 MB of memory for one job).
    # A conversation may grow by MAX_CONVERSATION_GROWTH bytes past its first request.
    big = FauxChatReply(
        tool_calls=[
            FauxToolCall(name="nope", arguments={"x": "a" * 40_000}) for _ in range(250)
        ]
    )
    job: dict[str, Any] = menu_job("g1", work={"tools": ["t_lookup"], "max_steps": 8})
    harness.reply("g1", "turn.0", big)
    harness.pick("g1", "turn.1", "escalate", {"team": "billing", "summary": "lost parcel"})
    assert await harness.run(job) == "escalation"
    assert harness.ledger.status().requests_sent == 1
    escalation = harness.terminal("g1")
    assert isinstance(escalation, EscalationMessage)
    assert escalation.reason == "menu_unparseable"
    assert "grew" in (escalation.detail or "")
