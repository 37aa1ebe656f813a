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
import base64
import copy
import json
import pickle
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection, Exchange, Producer

from shared import keys
from shared.jobs import MAX_STATE_BYTES
from shared.settings import Settings
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import decide_job, wait_until
from tests.support.processes import DECISIONS, decisions_env
from tests.support.services import free_port
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

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
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers()),
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
        "urgent",
        "escalate_below",
        st.floats(min_value=1.01, max_value=1e9),
        "questions.urgent.escalate_below",
    ),
    _question(
        "mood",
        "criteria",
        st.lists(st.text(max_size=5), min_size=11, max_size=30),
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
    return any(
        p["field"] == field or p["field"].startswith((field + ".", field + "[")) for p in problems
    )


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
        (
            pickle.dumps(((), {"jobs": [Boom(canary)]}, {})),
            "application/x-python-serialize",
            _task_headers(run_jobs),
        ),
        (json.dumps([[1, 2, 3], {}, {}]).encode(), "application/json", _task_headers(run_jobs)),
        (
            json.dumps([[], {"jobs": "{not json either"}, {}]).encode(),
            "application/json",
            _task_headers(run_jobs),
        ),
        (
            json.dumps(
                [[], {"jobs": [42, None, "x", garbage_job, unknown_provider, inner_valid]}, {}]
            ).encode(),
            "application/json",
            _task_headers(run_jobs),
        ),
    ]
    with Connection(crew.broker_url) as conn:
        producer = Producer(conn)
        for body, content_type, headers in bodies:
            producer.publish(
                body,
                exchange=exchange,
                routing_key=keys.CELERY_QUEUE,
                declare=[exchange],
                content_type=content_type,
                content_encoding="utf-8",
                headers=headers,
                serializer=None,
            )
    [last] = crew.jobs(1, "after")
    submitted = crew.submit([last])
    pairs = crew.pairs(
        [*submitted.job_ids, "bad-queue-garbage", "bad-queue-provider", "bad-queue-inner"]
    )
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


def test_an_envelope_that_is_no_message_is_dropped_and_the_worker_keeps_serving(
    new_fleet: FleetFactory,
) -> None:
    """Pushed by hand onto the queue's list, text that is no kombu envelope at all (not JSON,
    not an object, no delivery tag, a body that is no text) was read by the transport before
    any guard: an "Unrecoverable error" that stopped the worker, or a consumer reconnecting
    over and over. Each is dropped (``task.poison``) and the jobs between them are answered."""
    crew = new_fleet("bad-envelope")
    worker = crew.start_worker(worker_concurrency="1")
    envelopes = [
        b"not json at all \xff",
        b"42",
        b"[1, 2, 3]",
        b'"text"',
        b"null",
        b"{}",
        b'{"body": 1, "properties": {"delivery_tag": "t1"}}',
        b'{"body": "%%%", "properties": {"delivery_tag": "t2", "body_encoding": "base64"}}',
        b'{"body": "", "headers": 7, "properties": {"delivery_tag": "t3"}}',
    ]
    jobs = crew.jobs(len(envelopes) + 1, "between")
    for envelope, job in zip(envelopes, jobs, strict=False):
        crew.submit([job])
        crew.broker.lpush(keys.CELERY_QUEUE, envelope)
    crew.submit([jobs[-1]])
    # wait_for, not expect_replies: its report would parse the garbage left on the queue.
    missing = crew.wait_for(crew.pairs(j["id"] for j in jobs), timeout_s=60)
    assert worker.alive(), worker.text()[-2000:]
    assert not missing, sorted(missing)
    log = worker.text()
    assert "Unrecoverable" not in log and "Connection to broker lost" not in log
    assert log.count('"task.poison"') == len(envelopes)


# --- poison between good jobs (issue 16): nothing restarts, every good job is answered ----


def _group_pids(leader: int) -> set[int]:
    """Every live process of the worker's process group (its main process and its pool)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == leader and fields[0] != "Z":
            pids.add(int(stat.parent.name))
    return pids


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def _body(*jobs: Any) -> bytes:
    return json.dumps([[], {"jobs": list(jobs)}, {}]).encode()


def _text_body(*texts: str) -> bytes:
    return f'[[], {{"jobs": [{", ".join(texts)}]}}, {{}}]'.encode()


def _deep_envelope(job: dict[str, Any]) -> str:
    """A Redis transport envelope as kombu stores it, with headers 3,000 levels deep."""
    body = base64.b64encode(_body(job)).decode()
    headers = json.dumps(_task_headers(keys.RUN_JOBS_TASK))[:-1]
    headers += ', "deep": ' + "[" * 3_000 + "]" * 3_000 + "}"
    properties = {
        "body_encoding": "base64",
        "delivery_info": {"exchange": keys.CELERY_QUEUE, "routing_key": keys.CELERY_QUEUE},
        "priority": 0,
        "delivery_tag": str(uuid.uuid4()),
    }
    return (
        f'{{"body": "{body}", "content-encoding": "utf-8", '
        f'"content-type": "application/json", "headers": {headers}, '
        f'"properties": {json.dumps(properties)}}}'
    )


def test_poison_between_good_jobs_restarts_nothing_and_every_job_is_answered(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], tmp_path: Path
) -> None:
    port = free_port()
    crew = new_fleet("poison")
    worker = crew.start_worker(worker_concurrency="2", metrics_port=str(port))
    # The pool processes start after "ready."; wait for them before taking the pids.
    wait_until(lambda: len(_group_pids(worker.pid)) >= 3, 30, "the pool processes")
    pids = _group_pids(worker.pid)
    stream = crew.stream
    run_jobs = keys.RUN_JOBS_TASK

    def job(job_id: str, **extra: Any) -> dict[str, Any]:
        return decide_job(job_id, reply_to=stream, **extra)

    def text(job_id: str, state: str) -> str:
        return json.dumps(job(job_id, state="STATE")).replace('"STATE"', state)

    rejected = {  # job id -> the field its rejection must name
        "p-deep-300": "state",
        "p-deep-600": "state",
        "p-nan": "state",
        "p-inf": "state",
        "p-dup": "state",
        "p-surrogate": "state",
        "p-metadata": "metadata",
        "p-lone-job": "state",
        "p-in-chunk": "state",
        "p-big-int": "state",
        "p-deep-5000": "state",
    }
    json_task = ("application/json", lambda: _task_headers(run_jobs))
    poison: list[tuple[bytes, str, Callable[[], dict[str, Any]]]] = [
        (_body(job("p-deep-300", state=_nested(300))), *json_task),
        (_body(job("p-deep-600", state=_nested(600))), *json_task),
        (_text_body(text("p-nan", '{"x": NaN}')), *json_task),
        (_text_body(text("p-inf", "[1e400]")), *json_task),
        (_text_body(text("p-dup", '{"a": 1, "a": 2}')), *json_task),
        (_text_body(text("p-surrogate", '"\\ud800"')), *json_task),
        (_text_body(text("p-big-int", "[" + "7" * 200 + "]")), *json_task),
        (_body(job("p-metadata", metadata={"blob": "x" * 100_000})), *json_task),
        (
            json.dumps([[], {"jobs": job("p-lone-job", state=_nested(700))}, {}]).encode(),
            *json_task,
        ),
        (_body(job("p-in-chunk", state=_nested(650)), job("p-chunk-good")), *json_task),
        # Too deep for the parser: read around it, the rest of the chunk goes on.
        (
            _text_body(
                text("p-deep-5000", "[" * 5_000 + "]" * 5_000),
                json.dumps(job("p-chunk-good-2")),
            ),
            *json_task,
        ),
        # Dropped whole: nothing in them can be answered.
        (b'[[], {"jobs": [' + b"[" * 5_000 + b"]" * 5_000 + b"]}, {}]", *json_task),
        (_body(job("p-utf8")).replace(b"ticket", b"tick\xffet"), *json_task),
        (b"\xef\xbb\xbf" + _body(job("p-bom")), *json_task),
        (b"not json at all", *json_task),
        (b'{"not": "a task body"}', *json_task),
        (b"[[], {}, []]", *json_task),
        (json.dumps([_nested(600), {}, {}]).encode(), *json_task),
        (
            pickle.dumps(((), {"jobs": []}, {})),
            "application/x-python-serialize",
            lambda: _task_headers(run_jobs),
        ),
        (
            _body(job("p-deep-headers")),
            "application/json",
            lambda: {**_task_headers(run_jobs), "kwargsrepr": _nested(600)},
        ),
        (
            _body(job("p-big-headers")),
            "application/json",
            lambda: {**_task_headers(run_jobs), "argsrepr": "x" * 100_000},
        ),
    ]
    good = [f"poison-good-{i:02d}" for i in range(len(poison) + 1)]
    exchange = Exchange(keys.CELERY_QUEUE, type="direct")
    with Connection(crew.broker_url) as conn:
        producer = Producer(conn)

        def publish(body: bytes, content_type: str, headers: dict[str, Any]) -> None:
            producer.publish(
                body,
                exchange=exchange,
                routing_key=keys.CELERY_QUEUE,
                declare=[exchange],
                content_type=content_type,
                content_encoding="utf-8",
                headers=headers,
                serializer=None,
            )

        for i, (body, content_type, headers) in enumerate(poison):
            publish(_body(job(good[i])), *json_task[:1], _task_headers(run_jobs))
            publish(body, content_type, headers())
        # An envelope pushed by hand, its headers too deep for kombu's own reader.
        crew.broker.lpush(keys.CELERY_QUEUE, _deep_envelope(job("p-envelope")))
        publish(_body(job(good[-1])), "application/json", _task_headers(run_jobs))

    answered = [*good, "p-chunk-good", "p-chunk-good-2"]
    pairs = crew.pairs([*answered, *rejected])
    crew.expect_replies(pairs, timeout_s=90)
    figures = report(crew.check(pairs, reap=False))
    assert all(figures.outcomes[j] == "result" for j in answered), figures.outcomes
    messages = {json.loads(e.message)["job_id"]: json.loads(e.message) for e in crew.entries()}
    for job_id, field in rejected.items():
        assert figures.outcomes[job_id] == "rejected", job_id
        assert _names(field, messages[job_id]["problems"]), (job_id, messages[job_id])
        assert figures.requests_by_job[job_id] == 0
    assert messages["p-deep-600"]["problems"][0]["message"].startswith("nested more than")
    assert _group_pids(worker.pid) == pids, "a worker process restarted"
    assert worker.alive()
    log = worker.text()
    assert "RecursionError" not in log and "Unrecoverable" not in log
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for reason in (
        "job_refused",
        "undecodable",
        "malformed",
        "disallowed_content",
        "oversize_headers",
    ):
        assert f'decisions_poison_total{{reason="{reason}"}}' in metrics, reason


# --- batch files: one bad line never stops the others ----------------------------------


def _hostile_file(path: Path, stream: str) -> Path:
    """Good jobs on lines 1 and 9; every other line is bad in its own way."""

    def line(job_id: str, state: str = '"fine"') -> bytes:
        return (
            json.dumps(decide_job(job_id, reply_to=stream, state="S"))
            .replace('"S"', state)
            .encode()
        )

    lines = [
        line("file-good-1"),
        line("file-nan", '{"x": NaN}'),
        b'{"id": "file-dup", "id": "file-dup2", "state": "s"}',
        line("file-latin1").replace(b'"fine"', '"café"'.encode("latin-1")),
        b"\xef\xbb\xbf" + line("file-bom"),
        b'{"id": "file-deep", "state": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
        line("file-surrogate", '"\\ud800"'),
        b'{"id": "file-cut", "sta',
        line("file-good-2"),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_submit_sends_the_good_lines_and_names_each_bad_one_by_its_line(
    session_redis: Any, broker: Any, tmp_path: Path
) -> None:
    url = session_redis.url(12)
    batch = _hostile_file(tmp_path / "batch.jsonl", "file-replies")
    done = subprocess.run(
        [DECISIONS, "submit", str(batch), "--reply-to", "file-replies"],
        env=decisions_env(broker_url=url, redis_url=url, ledger_url="sqlite:///:memory:"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "submitted 2 job(s)" in done.stdout and "rejected 7" in done.stdout
    said = " ".join(done.stderr.split())
    for expected in (
        "rejected file-nan (line 2): state.x: nan is not a JSON number",
        "rejected line 3: (job): names a field twice ('id')",
        "rejected line 4: (body): not UTF-8",
        "rejected line 5: (body): starts with a byte order mark",
        "rejected file-deep (line 6): state[0][0][0][0][0][0]....: nested more than 100",
        "rejected file-surrogate (line 7): state: holds a lone surrogate",
        "rejected line 8: (body): not JSON",
    ):
        assert expected in said, (expected, said)
    queued = b" ".join(
        base64.b64decode(json.loads(stored)["body"])
        for stored in broker.lrange(keys.CELERY_QUEUE, 0, -1)
    )
    assert b"file-good-1" in queued and b"file-good-2" in queued
    assert b"file-nan" not in queued and b"file-surrogate" not in queued


def test_run_answers_the_good_lines_and_rejects_each_bad_one(tmp_path: Path) -> None:
    batch = _hostile_file(tmp_path / "batch.jsonl", "run-replies")
    done = subprocess.run(
        [DECISIONS, "run", str(batch), "--out", str(tmp_path / "out")],
        env=decisions_env(ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}"),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "line 4: not UTF-8" in said and "line 5: starts with a byte order mark" in said
    assert "│ answered │ 2 │" in said and "│ rejected │ 7 │" in said
