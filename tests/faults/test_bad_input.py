"""Bad input never reaches a provider and never stops a worker.

In process, hypothesis generates malformed jobs (wrong types, oversize values, too many
options or levels, unknown providers and models, bad deadlines, bodies that are not JSON or
not objects) and runs each through the real runner (SQLite ledger, the faux provider in
process, a memory sink): each ends in one ``rejected`` message naming the bad field, no
request, no ledger row. Through a real ``decisions worker``, hand-picked bodies are put on
the Celery queue raw (not JSON, not a task, an unknown task, pickle, a job list holding
garbage) and a valid job afterwards is still answered.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection, Exchange, Producer

from shared import keys
from shared.jobs import MAX_STATE_BYTES
from shared.settings import Settings
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import decide_job
from worker.faux import FauxProvider
from worker.ledger import Ledger
from worker.providers import ProviderRegistry
from worker.runner import Runner
from worker.sinks import MemorySink

pytestmark = pytest.mark.faults

REPLY_TO = "bad-input:replies"

# --- in process ---------------------------------------------------------------------


@dataclass
class Rig:
    runner: Runner
    ledger: Ledger
    faux: FauxProvider
    sink: MemorySink
    loop: asyncio.AbstractEventLoop

    def run(self, raw: Any) -> str:
        return self.loop.run_until_complete(self.runner.run_one(raw))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    config = Settings(
        _env_file=None,  # type: ignore[call-arg]
        ledger_url=f"sqlite:///{tmp_path_factory.mktemp('bad-input') / 'ledger.db'}",
        faux_url=None,
    )
    ledger = Ledger.from_settings(config)
    ledger.migrate()
    faux = FauxProvider()
    sink = MemorySink()
    providers = ProviderRegistry.from_settings(config, faux_transport=faux.transport())
    runner = Runner(settings=config, ledger=ledger, providers=providers, sink=sink)
    loop = asyncio.new_event_loop()
    yield Rig(runner, ledger, faux, sink, loop)
    loop.close()
    ledger.dispose()


def valid(job_id: str) -> dict[str, Any]:
    return decide_job(job_id, reply_to=REPLY_TO)


NOT_TEXT = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers()),
)
NOT_STATE = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
NOT_POSITIVE = st.one_of(st.floats(max_value=0, allow_nan=False), st.integers(max_value=0))
NOT_DATETIME = st.one_of(
    st.just("2030-01-01T00:00:00"),  # no timezone
    st.text(alphabet="abcxyz :-", min_size=1, max_size=12),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, Any]:
    """A malformed job (or body) and the field its rejection must name."""
    job = valid(f"bad-{uuid.uuid4().hex[:12]}")
    case = draw(st.sampled_from(CASES))
    return case(draw, job)


def _set(field: str, values: st.SearchStrategy[Any]) -> Callable[..., tuple[str, Any]]:
    def case(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
        job[field] = draw(values)
        return field, job

    return case


def _question(
    qid: str, key: str, values: st.SearchStrategy[Any], field: str
) -> Callable[..., tuple[str, Any]]:
    def case(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
        job["questions"] = copy.deepcopy(job["questions"])
        job["questions"][qid][key] = draw(values)
        return field, job

    return case


def _too_many_options(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    n = draw(st.integers(min_value=256, max_value=600))
    criteria = {f"t{i}": None for i in range(n)}
    team = {"type": "choice", "instructions": "Team?", "criteria": criteria}
    job["questions"] = {**job["questions"], "team": team}
    return "questions.team.criteria", job


def _unknown_provider(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    name = draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=3, max_size=20))
    job["provider"] = f"no-such-{name}"
    return "provider", job


def _unserved_model(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    # Parallel lists the models it serves (the faux and System One hosts take any name).
    job["provider"] = "parallel"
    job["model"] = "no-such-model-" + draw(st.text(alphabet="abc123", min_size=1, max_size=8))
    return "model", job


def _two_deadlines(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    job["timeout_s"] = draw(st.floats(min_value=1, max_value=60))
    job["deadline"] = "2030-01-01T00:00:00+00:00"
    return "timeout_s", job


def _unknown_field(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    name = draw(st.sampled_from(["colour", "priority", "callback", "__class__"]))
    job[name] = draw(NOT_TEXT)
    return name, job


def _not_json(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    text = json.dumps(job)
    cut = draw(st.integers(min_value=1, max_value=len(text) - 1))
    return "(body)", text[:cut]  # a truncated body, as a cut connection leaves it


def _not_an_object(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, Any]:
    return "(job)", draw(st.one_of(st.integers(), st.lists(st.integers(), max_size=3), st.none()))


CASES: list[Callable[..., tuple[str, Any]]] = [
    _set("id", st.one_of(NOT_TEXT, st.just(""), st.just(" padded "), st.text(min_size=201))),
    _set("reply_to", st.one_of(NOT_TEXT, st.just("has spaces"), st.just("-leading-dash"))),
    _set("state", st.one_of(NOT_STATE, st.just(""), st.just("   "))),
    _set("questions", st.one_of(st.just({}), st.lists(st.integers(), max_size=2), st.text())),
    _set("timeout_s", st.one_of(NOT_POSITIVE, st.text(alphabet="xyz", min_size=1))),
    _set("deadline", NOT_DATETIME),
    _set("metadata", st.one_of(st.lists(st.integers(), max_size=2), st.integers(), st.text())),
    _set("batch", st.one_of(st.integers(), st.text(min_size=201, max_size=300))),
    _set("kind", st.one_of(st.just("launch"), st.integers())),
    _question("urgent", "type", st.sampled_from(["maybe", "yesno", ""]), "questions.urgent"),
    _question(
        "urgent", "instructions", st.one_of(st.just(""), NOT_STATE), "questions.urgent.instructions"
    ),
    _question(
        "urgent", "escalate_below", st.floats(min_value=1.01, max_value=1e9),
        "questions.urgent.escalate_below",
    ),
    _question(
        "mood", "criteria", st.lists(st.text(max_size=5), min_size=11, max_size=30),
        "questions.mood.criteria",
    ),
    _question(
        "mood", "criteria", st.lists(st.text(max_size=5), max_size=1), "questions.mood.criteria"
    ),
    _too_many_options,
    _unknown_provider,
    _unserved_model,
    _two_deadlines,
    _unknown_field,
    _not_json,
    _not_an_object,
]


def _names(field: str, problems: list[dict[str, str]]) -> bool:
    return any(p["field"] == field or p["field"].startswith(field + ".") for p in problems)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=malformed())
def test_a_malformed_job_is_rejected_naming_its_field_and_nothing_is_sent(
    rig: Rig, case: tuple[str, Any]
) -> None:
    field, raw = case
    before = len(rig.sink.snapshot())
    sent_before = rig.faux.total()

    assert rig.run(raw) == "rejected"

    published = rig.sink.snapshot()[before:]
    assert [m.type for m in published] == ["rejected"]
    problems = json.loads(published[0].message)["problems"]
    assert _names(field, problems), (field, problems)
    assert rig.faux.total() == sent_before  # nothing reached the provider
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        assert rig.ledger.get_job(raw["id"]) is None  # nor the ledger


def test_an_oversize_state_is_rejected_naming_state(rig: Rig) -> None:
    job = valid(f"big-{uuid.uuid4().hex[:8]}")
    job["state"] = "x" * (MAX_STATE_BYTES + 1)
    sent_before = rig.faux.total()
    assert rig.run(job) == "rejected"
    problems = json.loads(rig.sink.snapshot()[-1].message)["problems"]
    assert [p["field"] for p in problems] == ["state"]
    assert rig.faux.total() == sent_before and rig.ledger.get_job(job["id"]) is None


def test_the_runner_still_answers_a_valid_job_after_the_garbage(rig: Rig) -> None:
    job = valid(f"good-{uuid.uuid4().hex[:8]}")
    sent_before = rig.faux.total()
    assert rig.run(job) == "result"
    assert rig.faux.total() == sent_before + 1


# --- through a real worker ----------------------------------------------------------


class Boom:
    """Unpickling this makes a directory: proof that a pickle was (or was not) loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.mkdir, (str(self.path),))


def _task_headers(task: str) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "retries": 0}


def test_garbage_on_the_queue_is_dropped_and_the_worker_keeps_serving(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], tmp_path: Path
) -> None:
    crew = new_fleet("bad-queue")
    worker = crew.start_worker(worker_concurrency="1")  # one at a time: the queue's order
    canary = tmp_path / "unpickled"
    stream = crew.stream
    garbage_job = {"id": "bad-queue-garbage", "reply_to": stream, "state": 5, "questions": {}}
    unknown_provider = decide_job("bad-queue-provider", reply_to=stream, provider="nobody")
    inner_valid = decide_job("bad-queue-inner", reply_to=stream)
    run_jobs = keys.RUN_JOBS_TASK
    exchange = Exchange(keys.CELERY_QUEUE, type="direct")
    bodies: list[tuple[bytes, str, dict[str, Any]]] = [
        (b'{"jobs": [{"id": "cut', "application/json", _task_headers(run_jobs)),
        (b'{"not": "a task body"}', "application/json", _task_headers(run_jobs)),
        (b"42", "application/json", _task_headers(run_jobs)),
        (json.dumps([[], {"jobs": []}, {}]).encode(), "application/json", {"task": run_jobs}),
        (json.dumps([[], {}, {}]).encode(), "application/json", _task_headers("decisions.rm_rf")),
        (b'{"hello": "no task header at all"}', "application/json", {}),
        (pickle.dumps(((), {"jobs": [Boom(canary)]}, {})), "application/x-python-serialize",
         _task_headers(run_jobs)),
        (json.dumps([[1, 2, 3], {}, {}]).encode(), "application/json", _task_headers(run_jobs)),
        (json.dumps([[], {"jobs": "{not json either"}, {}]).encode(), "application/json",
         _task_headers(run_jobs)),
        (json.dumps([[], {"jobs": [42, None, "x", garbage_job, unknown_provider, inner_valid]},
                     {}]).encode(), "application/json", _task_headers(run_jobs)),
    ]
    with Connection(crew.broker_url) as conn:
        producer = Producer(conn)
        for body, content_type, headers in bodies:
            producer.publish(
                body, exchange=exchange, routing_key=keys.CELERY_QUEUE, declare=[exchange],
                content_type=content_type, content_encoding="utf-8", headers=headers,
                serializer=None,
            )
    [last] = crew.jobs(1, "after")
    submitted = crew.submit([last])
    pairs = crew.pairs([*submitted.job_ids, "bad-queue-garbage", "bad-queue-provider",
                        "bad-queue-inner"])
    crew.expect_replies(pairs, timeout_s=60)
    assert worker.alive()
    figures = report(crew.check(pairs, reap=False))
    assert figures.outcomes[last["id"]] == "result"
    assert figures.outcomes["bad-queue-inner"] == "result"
    assert figures.requests_by_job["bad-queue-garbage"] == 0
    assert figures.requests_by_job["bad-queue-provider"] == 0
    messages = {json.loads(e.message)["job_id"]: json.loads(e.message) for e in crew.entries()}
    assert _names("state", messages["bad-queue-garbage"]["problems"])
    assert _names("questions", messages["bad-queue-garbage"]["problems"])
    assert _names("provider", messages["bad-queue-provider"]["problems"])
    # Jobs without a usable reply_to are rejected to the shared rejected stream.
    elsewhere = [json.loads(e.message) for e in crew.entries(keys.REJECTED_STREAM)]
    fields = sorted(p["field"] for m in elsewhere for p in m["problems"])
    assert fields.count("(job)") == 2 and fields.count("(body)") == 2, fields
    assert not canary.exists(), "a pickled body was loaded"
    assert "ContentDisallowed" in worker.text() or "untrusted content" in worker.text()
    assert crew.calls().get("bad-queue-inner/decide") == 1
