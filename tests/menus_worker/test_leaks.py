"""Handlers and tools cannot leak through their errors or returns: what reaches the reply or
escalation stream and the ledger (and so the console and ``decisions trace``) is the error's
type and a scrubbed message; a return value with no JSON form is a handler error naming its
type, never its repr."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from shared.replies import EscalationMessage
from shared.scrub import mark_secret
from tests.menus_worker.support import OPTIONS, Harness, menu_job
from worker.kinds.menus.handlers import handler
from worker.testing.faux import FauxChatReply, FauxToolCall

LIVE = f"sk-live-{uuid.uuid4().hex}"
TOKEN = f"tok{uuid.uuid4().hex}"
ENV_KEY = f"or-{uuid.uuid4().hex}"
MARKED = f"marked-{uuid.uuid4().hex}"
PASSWORD = f"hunter2-{uuid.uuid4().hex[:8]}"


def _leaky_text() -> str:
    return (
        f"POST https://payments.example/charge?api_key={LIVE} failed; "
        f"Authorization: Bearer {TOKEN}; sent {ENV_KEY.upper()} as "
        f"{base64.b64encode(f'user:{ENV_KEY}'.encode()).decode()} to "
        f"https://admin:{PASSWORD}@ledger.internal/x; the vault said {MARKED}"
    )


class Weird:
    """A value with no JSON form whose repr holds a password."""

    def __init__(self, password: str) -> None:
        self.password = password

    def __repr__(self) -> str:
        return f"Weird(password={self.password!r})"


@handler("t_leak_raise")
def leak_raise(reason: str) -> None:
    """Charge the card."""
    raise RuntimeError(_leaky_text())


@handler("t_leak_weird")
def leak_weird(reason: str) -> Any:
    """Look the customer up."""
    return Weird(PASSWORD)


@handler("t_leak_nested")
def leak_nested(reason: str) -> Any:
    """Look the order up."""
    return {"order": "A-1", "owner": Weird(PASSWORD)}


@handler("t_leak_nan")
def leak_nan(reason: str) -> Any:
    """Score the order."""
    return {"score": float("nan")}


SECRETS = (LIVE, TOKEN, ENV_KEY, ENV_KEY.upper(), MARKED, PASSWORD)


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", ENV_KEY)
    mark_secret(MARKED)


def everything_kept(harness: Harness, job_id: str) -> str:
    """Every message published for the job and every ledger row of it, as text."""
    published = [m.message for m in harness.sink.snapshot() if m.job_id == job_id]
    calls = [f"{c.outcome_json} {c.error_code}" for c in harness.ledger.calls(job_id)]
    return "\n".join([*published, *calls])


def assert_nothing_leaked(harness: Harness, job_id: str) -> None:
    kept = everything_kept(harness, job_id)
    assert [s for s in SECRETS if s in kept] == []
    assert "Weird(" not in kept


def escalation(harness: Harness, job_id: str) -> EscalationMessage:
    message = harness.terminal(job_id)
    assert isinstance(message, EscalationMessage), message
    assert message.reason == "handler_failed"
    return message


async def test_a_handler_error_reaches_the_reply_and_ledger_scrubbed(harness: Harness) -> None:
    options = [*OPTIONS, {"kind": "handler", "name": "pay", "handler": "t_leak_raise"}]
    harness.pick("l1", "pick.0", "pay", {"reason": "refund"})
    assert await harness.run(menu_job("l1", options=options)) == "escalation"
    detail = escalation(harness, "l1").detail
    assert detail.startswith(
        "t_leak_raise raised RuntimeError: POST https://payments.example/charge"
    )
    assert "https://ledger.internal/x" in detail
    assert_nothing_leaked(harness, "l1")
    # Delivered again: the stored (scrubbed) failure is what the escalation repeats.
    assert await harness.run(menu_job("l1", options=options)) == "escalation"
    assert_nothing_leaked(harness, "l1")


@pytest.mark.parametrize(
    ("name", "type_name"),
    [("t_leak_weird", "Weird"), ("t_leak_nested", "dict"), ("t_leak_nan", "dict")],
)
async def test_a_return_with_no_json_form_is_a_handler_error_naming_its_type(
    harness: Harness, name: str, type_name: str
) -> None:
    job_id = f"w-{name}"
    options = [*OPTIONS, {"kind": "handler", "name": "look", "handler": name}]
    harness.pick(job_id, "pick.0", "look", {"reason": "why"})
    assert await harness.run(menu_job(job_id, options=options)) == "escalation"
    detail = escalation(harness, job_id).detail
    assert f"HandlerOutputInvalid: returned a value of type {type_name}" in detail
    assert harness.call_statuses(job_id)["handler"] == "failed"
    assert_nothing_leaked(harness, job_id)


def tool_turn(name: str) -> FauxChatReply:
    return FauxChatReply(tool_calls=[FauxToolCall(name=name, arguments={"reason": "x"})])


@pytest.mark.parametrize("tool", ["t_leak_raise", "t_leak_weird"])
async def test_a_tool_error_or_bad_return_is_scrubbed_and_never_shown_to_the_model(
    harness: Harness, tool: str
) -> None:
    job_id = f"t-{tool}"
    harness.reply(job_id, "turn.0", tool_turn(tool))
    job = menu_job(job_id, work={"tools": [tool], "max_steps": 3})
    assert await harness.run(job) == "escalation"
    assert escalation(harness, job_id).detail.startswith(f"tool {tool} raised ")
    assert harness.model_calls(job_id) == {"turn.0": 1}
    assert_nothing_leaked(harness, job_id)
