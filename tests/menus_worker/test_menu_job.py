"""The menu job on the wire: one envelope with the decide job, discriminated on ``kind``."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from shared.errors import JobInvalid
from shared.fingerprint import job_fingerprint
from shared.job_parsing import job_kind, parse_job
from shared.jobs import Job, MenuJob
from shared.menus import Handler
from tests.menus_worker.support import OPTIONS, menu_job


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
