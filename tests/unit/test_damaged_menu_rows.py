"""A redelivered menu job that finds one of its calls' stored outcomes damaged still ends, with
one terminal message, sending and running nothing again (the menu twin of
``test_damaged_call_rows``).

A menu job replays each settled call from its ``outcome_json``: a model call's reply, a
tool's result, the handler's value (``worker.kinds.menus.stored``). A ledger written by hand
(a repair, a restore, a disk) can hold one that is not JSON, of another shape or nested too
deep. Reading it must not crash the redelivery (the job would get no terminal message, and
its message would be redelivered for ever), nor replay something made up in its place (an
empty tool result, a ``null`` value); and the call is never made again (at most once). Its
outcome is not known: the job escalates ``decision_interrupted``, naming the call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from shared.replies import EscalationMessage, ResultMessage, parse_reply
from tests.menus_worker import handlers
from tests.menus_worker.support import OPTIONS, menu_job
from tests.unit.test_damaged_call_rows import Env
from worker.kinds.dispatch import Runner
from worker.kinds.menus import MenuRunner
from worker.kinds.menus.handlers import load_handlers
from worker.runtimes import RuntimeRegistry
from worker.testing.faux import FauxChatReply, FauxToolCall

REFUND = {"order_id": "A-1", "amount": 5}
DEEP = "[" * 100_000 + "]" * 100_000

#: Damaged ``outcome_json`` of an answered model call (``pick.N``, ``turn.N``).
DAMAGED_REPLIES = {
    "not-json": "not json{",
    "a-list": "[]",
    "null": "null",
    "deep": DEEP,
    "deep-in-the-reply": '{"reply": {"text": "x", "tool_calls": ' + DEEP + "}}",
    "no-reply": '{"head": "x"}',
    "reply-not-an-object": '{"reply": 5}',
    "text-not-text": '{"reply": {"text": {"a": [1]}, "finish_reason": "stop"}}',
    "tool-calls-not-a-list": '{"reply": {"text": null, "tool_calls": 5}}',
    "tool-call-not-an-object": '{"reply": {"text": null, "tool_calls": ["t_lookup"]}}',
    "tool-call-missing-keys": '{"reply": {"text": null, "tool_calls": [{"id": "call_0"}]}}',
    "tool-call-name-not-text": (
        '{"reply": {"text": null, "tool_calls": [{"id": "call_0", "name": 5, "arguments": "{}"}]}}'
    ),
    "arguments-not-text": (
        '{"reply": {"text": null, "tool_calls": '
        '[{"id": "call_0", "name": "t_lookup", "arguments": {"order_id": "A-1"}}]}}'
    ),
}
#: Those a pick's reply (its pick is in its text) is checked with too.
PICK_REPLIES = ("not-json", "a-list", "deep", "no-reply", "text-not-text", "tool-call-missing-keys")
#: Damaged ``outcome_json`` of an answered tool run (``tool.N``).
DAMAGED_TOOL_RESULTS = {
    "not-json": "not json{",
    "a-list": "[]",
    "a-string": '"x"',
    "deep": DEEP,
    "no-content": '{"tool": "t_lookup", "turn": "turn.0", "call_id": "c1", "args": {}}',
    "content-not-text": '{"tool": "t_lookup", "content": {"status": "lost"}}',
}
#: Damaged ``outcome_json`` of an answered handler run (``handler``).
DAMAGED_VALUES = {
    "not-json": "not json{",
    "a-list": "[]",
    "null": "null",
    "deep": DEEP,
    "deep-in-the-value": '{"handler": "t_refund", "value": ' + DEEP + "}",
    # Read, but nested past what a result message can carry (no handler's value could be).
    "too-deep-to-send": '{"handler": "t_refund", "value": ' + "[" * 500 + "]" * 500 + "}",
    "no-value": '{"handler": "t_refund", "option": "refund", "args": {}}',
}


class MenuEnv(Env):
    """``Env`` (a ledger on either backend, the faux in process) with a menu runner on the
    menu-worker tests' handlers, the model scripted per call."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.handlers = load_handlers(["tests.menus_worker.handlers"])

    def runner(self) -> Runner:
        runner = super().runner()
        runtimes = RuntimeRegistry.from_settings(
            self.settings, faux_transport=self.faux.transport()
        )
        runner.menus = MenuRunner(runner.delivery, handlers=self.handlers, runtimes=runtimes)
        return runner

    def reply(self, job_id: str, step: str, reply: FauxChatReply) -> None:
        by_call = dict(self.faux.chat.behaviour.by_call)
        by_call[f"{job_id}/{step}"] = reply
        self.faux.chat.update_behaviour(by_call=by_call)

    def damage(self, job_id: str, step: str, outcome_json: str | None) -> None:
        self.sql(
            "UPDATE calls SET outcome_json = :v WHERE job_id = :j AND step = :s",
            v=outcome_json, j=job_id, s=step,
        )  # fmt: skip


@pytest.fixture
def env(ledger_url: str) -> Iterator[MenuEnv]:
    handlers.RUNS.clear()
    menus = MenuEnv(ledger_url)
    yield menus
    menus.close()
    handlers.RUNS.clear()


def plain(env: MenuEnv, job_id: str) -> dict[str, Any]:
    """pick.0 picks ``refund``, then the handler runs."""
    env.reply(job_id, "pick.0", FauxChatReply(pick="refund", args=REFUND))
    return menu_job(job_id)


def working(env: MenuEnv, job_id: str) -> dict[str, Any]:
    """turn.0 asks for a tool, tool.0 runs it, turn.1 picks ``refund``, the handler runs."""
    call = FauxToolCall(name="t_lookup", arguments={"order_id": "A-1"})
    env.reply(job_id, "turn.0", FauxChatReply(tool_calls=[call]))
    env.reply(job_id, "turn.1", FauxChatReply(pick="refund", args=REFUND))
    return menu_job(job_id, work={"tools": ["t_lookup"], "max_steps": 3})


def failing(env: MenuEnv, job_id: str) -> dict[str, Any]:
    """pick.0 picks ``pay``, whose handler raises."""
    env.reply(job_id, "pick.0", FauxChatReply(pick="pay", args={"reason": "x"}))
    pay = {"kind": "handler", "name": "pay", "handler": "t_explode"}
    return menu_job(job_id, options=[*OPTIONS, pay])


def redelivered_damaged(
    env: MenuEnv, job: dict[str, Any], step: str, outcome_json: str | None, first: str
) -> tuple[str, list[dict[str, Any]], tuple[int, int]]:
    """Run ``job`` to its end (``first``); then take its terminal message back (as a hand
    restoring the ledger may leave it), damage ``step``'s stored outcome and deliver the job
    again: what it ended with, its logs, and what was sent and run before it."""
    assert env.run(job) == first
    before = (env.faux.total(), len(handlers.RUNS))
    env.unfinish(job["id"])
    env.damage(job["id"], step, outcome_json)
    with capture_logs() as logs:
        ended = env.run(job)
    return ended, logs, before


def check_escalated(
    env: MenuEnv,
    job: dict[str, Any],
    step: str,
    ended: str,
    logs: list[dict[str, Any]],
    before: tuple[int, int],
    reason: str = "decision_interrupted",
) -> EscalationMessage:
    job_id = job["id"]
    assert ended == "escalation"
    [published] = env.sink.snapshot()  # exactly one terminal message
    message = parse_reply(published.message)
    assert isinstance(message, EscalationMessage), message
    assert (message.job_id, message.reason) == (job_id, reason)
    assert f"the stored outcome of call {job_id}/{step} cannot be read" in message.detail
    # Nothing sent to the provider, nothing run again.
    assert (env.faux.total(), len(handlers.RUNS)) == before
    row = env.ledger.get_job(job_id)
    assert row is not None and row.terminal_reason == reason
    # Logged naming the call; no traceback anywhere.
    unreadable = [e for e in logs if e["event"] == "call.stored_unreadable"]
    assert [(e["job_id"], e["step"]) for e in unreadable] == [(job_id, step)]
    assert not [e for e in logs if e.get("exc_info") or e.get("log_level") == "critical"]
    # The next delivery replays that message: still nothing sent nor run.
    assert env.run(job) == "escalation"
    assert (env.faux.total(), len(handlers.RUNS)) == before
    [again] = env.sink.snapshot()
    assert parse_reply(again.message) == message
    return message


# --- a model call ----------------------------------------------------------------------------


@pytest.mark.parametrize("damaged", DAMAGED_REPLIES.values(), ids=DAMAGED_REPLIES.keys())
def test_a_work_turn_that_cannot_be_read_escalates_and_nothing_is_sent_or_run_again(
    env: MenuEnv, damaged: str
) -> None:
    job = working(env, "w-turn")
    ended, logs, before = redelivered_damaged(env, job, "turn.0", damaged, "result")
    assert before == (2, 2)  # turn.0 and turn.1 sent; t_lookup and t_refund run
    message = check_escalated(env, job, "turn.0", ended, logs, before)
    # Stopped at turn.0: its tool is not run from a reply nobody can read, nor turn.1 asked.
    assert [(r.step, r.replayed) for r in message.receipts] == [("turn.0", True)]


@pytest.mark.parametrize("name", PICK_REPLIES)
def test_a_pick_that_cannot_be_read_escalates_and_nothing_is_sent_again(
    env: MenuEnv, name: str
) -> None:
    job = plain(env, "m")
    ended, logs, before = redelivered_damaged(env, job, "pick.0", DAMAGED_REPLIES[name], "result")
    assert before == (1, 1)
    message = check_escalated(env, job, "pick.0", ended, logs, before)
    assert [(r.step, r.replayed) for r in message.receipts] == [("pick.0", True)]
    assert message.context["menu"] and message.context["options"]


def test_an_answered_model_call_that_stored_no_reply_escalates(env: MenuEnv) -> None:
    job = plain(env, "m-none")
    ended, logs, before = redelivered_damaged(env, job, "pick.0", None, "result")
    check_escalated(env, job, "pick.0", ended, logs, before)


# --- a tool run and the handler ------------------------------------------------------------


@pytest.mark.parametrize("damaged", DAMAGED_TOOL_RESULTS.values(), ids=DAMAGED_TOOL_RESULTS.keys())
def test_a_tool_result_that_cannot_be_read_escalates_and_nothing_runs_again(
    env: MenuEnv, damaged: str
) -> None:
    job = working(env, "w-tool")
    ended, logs, before = redelivered_damaged(env, job, "tool.0", damaged, "result")
    message = check_escalated(env, job, "tool.0", ended, logs, before)
    # Never fed to the model in place of the result it saw: the job stops at the tool.
    assert [r.step for r in message.receipts] == ["turn.0", "tool.0"]


@pytest.mark.parametrize("damaged", DAMAGED_VALUES.values(), ids=DAMAGED_VALUES.keys())
def test_a_handler_value_that_cannot_be_read_escalates_and_the_handler_never_runs_again(
    env: MenuEnv, damaged: str
) -> None:
    job = plain(env, "h")
    ended, logs, before = redelivered_damaged(env, job, "handler", damaged, "result")
    message = check_escalated(env, job, "handler", ended, logs, before)
    assert [(r.step, r.replayed) for r in message.receipts] == [
        ("pick.0", True),
        ("handler", True),
    ]


def test_a_handler_that_stored_null_as_its_value_still_replays_it(env: MenuEnv) -> None:
    # A value of null is a value (a handler may return None): read, not damaged.
    job = plain(env, "h-null")
    assert env.run(job) == "result"
    env.unfinish("h-null")
    env.damage("h-null", "handler", '{"handler": "t_refund", "value": null, "head": "null"}')
    assert env.run(job) == "result"
    [published] = env.sink.snapshot()
    message = parse_reply(published.message)
    assert isinstance(message, ResultMessage) and message.value is None
    assert (env.faux.total(), len(handlers.RUNS)) == (1, 1)


@pytest.mark.parametrize("damaged", ["not json{", "[]", DEEP], ids=["not-json", "a-list", "deep"])
def test_a_failed_handler_whose_error_cannot_be_read_still_escalates_handler_failed(
    env: MenuEnv, damaged: str
) -> None:
    # The call's own columns say it failed: that stands; only its error text is lost.
    job = failing(env, "f")
    ended, logs, before = redelivered_damaged(env, job, "handler", damaged, "escalation")
    message = check_escalated(env, job, "handler", ended, logs, before, reason="handler_failed")
    assert message.detail.startswith("t_explode raised handler_error")
