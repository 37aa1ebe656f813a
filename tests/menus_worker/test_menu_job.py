"""The menu job on the wire: one envelope with the decide job, discriminated on ``kind``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from shared.errors import JobInvalid
from shared.fingerprint import job_fingerprint
from shared.job_parsing import job_kind, parse_job
from shared.jobs import Job, MenuJob
from shared.menus import Handler
from shared.replies import EscalationMessage, ResultMessage
from tests.menus_worker import handlers
from tests.menus_worker.support import OPTIONS, Harness, menu_job


def test_a_menu_job_parses_from_bytes_with_its_defaults() -> None:
    job = parse_job(json.dumps(menu_job("b1")).encode())
    assert isinstance(job, MenuJob)
    assert (job.max_retries, job.work, job.runtime.provider, job.runtime.model) == (
        1,
        None,
        None,
        None,
    )
    assert job.options == OPTIONS


def test_the_schema_discriminates_on_kind() -> None:
    schema = TypeAdapter(Job).json_schema()
    assert set(schema["discriminator"]["mapping"]) >= {"decide", "menu"}


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job({**menu_job("k"), "kind": "plan"})
    [problem] = caught.value.problems
    assert problem.field == "kind" and "'menu'" in problem.message and "'decide'" in problem.message


def test_job_kind_reads_without_validating() -> None:
    assert job_kind({"kind": "menu"}) == "menu"
    assert job_kind({"id": "x"}) == "decide"
    assert job_kind(b'{"kind": "menu", "options": 3}') == "menu"
    assert job_kind("not json") is None
    assert job_kind([1]) is None


def test_menu_job_of_encodes_the_python_notation() -> None:
    job = MenuJob.of(
        prompt="p",
        options={"refund": (Handler("t_refund"), "Money back."), "close": "CLOSED"},
        id="o1",
        reply_to="r",
        max_retries=0,
    )
    assert job.options == [
        {"kind": "handler", "name": "refund", "handler": "t_refund", "description": "Money back."},
        {"kind": "value", "name": "close", "value": "CLOSED"},
    ]
    # Transport fields are not part of what makes it the same job.
    moved = job.model_copy(update={"reply_to": "elsewhere", "timeout_s": 5})
    assert job_fingerprint(moved) == job_fingerprint(job)
    assert job_fingerprint(job.model_copy(update={"prompt": "q"})) != job_fingerprint(job)


async def test_a_handler_result_no_json_writer_can_encode_still_ends_the_job_once(
    harness: Harness,
) -> None:
    # Found by an attack (through a model's pick, and here through a handler): a result
    # holding a lone surrogate could not be written, so the job's terminal message never
    # was: every redelivery failed the same way until the reaper gave the job up.
    options = [*OPTIONS, {"kind": "handler", "name": "odd", "handler": "t_unwritable"}]
    job: dict[str, Any] = menu_job("u1", options=options)
    harness.pick("u1", "pick.0", "odd", {"note": "hi"})
    assert await harness.run(job) == "result"
    result = harness.terminal("u1")
    assert isinstance(result, ResultMessage)
    assert json.dumps(result.value, ensure_ascii=False).encode()  # UTF-8 all through
    assert len(handlers.runs_of("t_unwritable")) == 1
    assert await harness.run(job) == "result"  # a redelivery replays it; nothing runs again
    assert len(handlers.runs_of("t_unwritable")) == 1


def test_a_message_holding_a_lone_surrogate_is_written_with_a_question_mark() -> None:
    # What a handler's exception text (an escalation's detail) may carry: the message is
    # written all the same, so that its job ends.
    message = EscalationMessage(job_id="u2", reason="handler_failed", detail="raised \udfff!")
    text = message.to_json()
    text.encode("utf-8")
    assert json.loads(text)["detail"] == "raised ?!"
