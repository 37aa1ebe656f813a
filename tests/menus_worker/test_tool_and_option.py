"""One function as both a work tool and a decision option, and the retry count a work
turn cannot change (seed 000: the ``exec(choices=)`` path is fixed at one retry)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.jobs import MenuJob
from shared.menus import run_turn
from shared.menus.faux import ScriptedRuntime, pick_text, tool_calls
from shared.replies import ResultMessage
from tests.menus_worker import handlers
from tests.menus_worker.support import OPTIONS, Harness, menu_job
from worker.testing.faux import FauxChatReply, FauxToolCall

WORK = {"tools": ["t_lookup"], "max_steps": 3}


@pytest.mark.parametrize("retries", [0, 2, 5])
def test_a_work_job_with_another_retry_count_is_rejected_naming_max_retries(
    retries: int,
) -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job(menu_job("m1", work=WORK, max_retries=retries))
    [problem] = caught.value.problems
    assert problem.field == "max_retries" and "exactly 1" in problem.message


@pytest.mark.parametrize("fields", [{}, {"max_retries": 1}])
def test_a_work_job_with_the_one_retry_it_has_is_accepted(fields: dict[str, Any]) -> None:
    job = parse_job(menu_job("m2", work=WORK, **fields))
    assert isinstance(job, MenuJob) and job.max_retries == 1


def test_a_pick_only_job_keeps_its_retry_count() -> None:
    job = parse_job(menu_job("m3", max_retries=3))
    assert isinstance(job, MenuJob) and job.max_retries == 3


# --- one function, tool and option ----------------------------------------------------------


LOOKED_UP: list[str] = []


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    LOOKED_UP.append(order_id)
    return {"order_id": order_id, "status": "shipped"}


def test_the_engine_offers_one_function_as_a_tool_and_as_an_option() -> None:
    LOOKED_UP.clear()
    runtime = ScriptedRuntime(
        [
            tool_calls(("lookup_order", {"order_id": "A1"})),
            pick_text("lookup", {"order_id": "A2"}, prose="Looked at A1; A2 decides it."),
        ]
    )
    got = run_turn(
        "Handle ticket T1.",
        tools=[lookup_order],
        choices={"lookup": lookup_order, "close": "CLOSED"},
        runtime=runtime,
    )
    assert got == {"order_id": "A2", "status": "shipped"}
    # Called once as a tool (A1), then once as the pick (A2).
    assert LOOKED_UP == ["A1", "A2"]
    first = runtime.requests[0]
    assert first.tools is not None and [t.name for t in first.tools] == ["lookup_order"]


async def test_a_worker_runs_one_handler_as_a_tool_then_as_the_pick(harness: Harness) -> None:
    options = [*OPTIONS, {"kind": "handler", "name": "lookup", "handler": "t_lookup"}]
    job = menu_job("both1", options=options, work=WORK)
    harness.reply(
        "both1",
        "turn.0",
        FauxChatReply(tool_calls=[FauxToolCall(name="t_lookup", arguments={"order_id": "A-1"})]),
    )
    harness.pick("both1", "turn.1", "lookup", {"order_id": "A-2"})
    assert await harness.run(job) == "result"
    message = harness.terminal("both1")
    assert isinstance(message, ResultMessage)
    assert message.value == {"order_id": "A-2", "status": "lost in transit"}
    assert handlers.runs_of("t_lookup") == [{"order_id": "A-1"}, {"order_id": "A-2"}]
    assert harness.call_statuses("both1") == {
        "turn.0": "answered",
        "tool.0": "answered",
        "turn.1": "answered",
        "handler": "answered",
    }
