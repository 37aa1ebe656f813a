"""What ``submit_batch`` puts on the queue: each job's JSON, taken at validation, spliced
into the body kombu would have written, and re-parsing to the job the client validated."""

from __future__ import annotations

import json
import math
import typing
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery
from kombu.utils import json as kombu_json
from pydantic import BaseModel

from shared import keys
from shared.chunk_publisher import EncodedJobs, SplicingProducer
from shared.client import Client
from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.job_wire import wire_text
from shared.jobs import JOB_TYPES
from shared.message_size import one_job_message_bytes
from shared.settings import Settings

NOW = datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)


def job(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j1",
        "kind": "decide",
        "state": {"body": "Help, payouts fail", "note": "café ☕"},
        "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?", "escalate_below": None},
            "team": {"type": "choice", "instructions": "Team?", "criteria": {"a": None}},
        },
        "timeout_s": 60,
    }
    base.update(over)
    return base


def client() -> Client:
    return Client(Settings())


def wire(raw: Any) -> tuple[Any, dict[str, Any]]:
    validated, stamped = client()._checked(raw, "claims", NOW)
    return validated, json.loads(wire_text(validated, stamped))


def test_a_plain_dict_goes_as_given_with_its_stamps_and_parses_to_the_validated_job() -> None:
    validated, sent = wire(job())
    assert sent == {**job(), "reply_to": "claims", "submitted_at": "2026-12-01T10:00:00.123456Z"}
    assert parse_job(sent) == validated


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"when": NOW}, "metadata.when"),
        ({"x": math.nan}, "metadata.x"),
        ({"x": math.inf}, "metadata.x"),
        ({"s": {1, 2}}, "metadata.s"),
        ({"b": b"bytes"}, "metadata.b"),
    ],
)
def test_anything_not_plain_json_is_refused_naming_its_field(
    metadata: dict[str, Any], field: str
) -> None:
    # Never rewritten on the way (NaN used to go as null, a datetime as its text).
    with pytest.raises(JobInvalid) as info:
        wire(job(metadata=metadata))
    assert [p.field for p in info.value.problems] == [field]


def test_a_cycle_is_refused_as_too_deep() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(JobInvalid) as info:
        wire(job(metadata={"loop": loop}))
    [problem] = info.value.problems
    assert problem.field.startswith("metadata.loop") and "levels deep" in problem.message


def test_a_job_object_goes_as_its_dump() -> None:
    model = parse_job(job(reply_to="claims"))
    validated, sent = wire(model)
    assert sent == validated.model_dump(mode="json", exclude_none=True)


def test_the_text_is_taken_at_validation() -> None:
    raw = job()
    validated, stamped = client()._checked(raw, "claims", NOW)
    text = wire_text(validated, stamped)
    raw["state"]["body"] = "changed later"
    assert json.loads(text)["state"]["body"] == "Help, payouts fail"


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []
        self.connection = "the producer's"

    def publish(self, body: Any, **kwargs: Any) -> None:
        self.calls.append((body, kwargs))


EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def test_a_chunk_body_is_spliced_into_json_text() -> None:
    recorder = Recorder()
    jobs = [json.dumps(job(id=f"j{i}")) for i in range(3)]
    SplicingProducer(recorder).publish(((), {"jobs": EncodedJobs(jobs)}, EMBED), serializer="json")
    [(body, kwargs)] = recorder.calls
    assert kwargs["content_type"] == "application/json" and kwargs["content_encoding"] == "utf-8"
    assert kombu_json.loads(body) == [[], {"jobs": [json.loads(j) for j in jobs]}, EMBED]
    assert SplicingProducer(recorder).connection == "the producer's"


def test_other_bodies_and_serializers_are_published_as_before() -> None:
    recorder = Recorder()
    splicing = SplicingProducer(recorder)
    splicing.publish(((), {"other": 1}, EMBED), serializer="json")
    splicing.publish(((), {"jobs": EncodedJobs(['{"id": "j1"}'])}, EMBED), serializer="yaml")
    assert recorder.calls[0] == (((), {"other": 1}, EMBED), {"serializer": "json"})
    assert recorder.calls[1] == (((), {"jobs": [{"id": "j1"}]}, EMBED), {"serializer": "yaml"})


def test_a_submitted_chunk_reads_back_from_the_broker_as_the_validated_jobs() -> None:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    producer_client = Client(Settings(), celery_app=app)
    raws = [job(id="j1"), job(id="j2", metadata={"when": NOW.isoformat()})]
    report = producer_client.submit_batch(raws, reply_to="claims", chunk_size=2)
    assert report.job_ids == ["j1", "j2"] and report.messages == 1
    with app.connection_for_read() as conn, conn.SimpleQueue(keys.CELERY_QUEUE) as queue:
        message = queue.get(timeout=5)
        message.ack()
    assert message.content_type == "application/json"
    assert message.headers["task"] == keys.RUN_JOBS_TASK
    args, kwargs, embed = message.decode()
    assert args == [] and embed == EMBED
    parsed = [parse_job(j) for j in kwargs["jobs"]]
    assert [p.id for p in parsed] == ["j1", "j2"]
    assert all(p.reply_to == "claims" and p.submitted_at is not None for p in parsed)


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    if model in seen:
        return seen
    seen.add(model)
    for info in model.model_fields.values():
        for part in _annotation_parts(info.annotation):
            if isinstance(part, type) and issubclass(part, BaseModel):
                _models(part, seen)
    return seen


def _annotation_parts(annotation: Any) -> list[Any]:
    parts = [annotation]
    for arg in typing.get_args(annotation):
        parts += _annotation_parts(arg)
    return parts


@pytest.mark.parametrize("kind", JOB_TYPES, ids=lambda k: k.__name__)
def test_every_job_model_dumps_what_it_was_given(kind: type[BaseModel]) -> None:
    # What lets a validated dict go on the queue as given (``wire_text``): no model drops
    # or renames a field, or writes one differently from how it reads it.
    for model in _models(kind, set()):
        assert model.model_config.get("extra") == "forbid", model
        decorators = model.__pydantic_decorators__
        assert not decorators.field_serializers and not decorators.model_serializers, model
        assert not model.model_computed_fields, model
        for name, info in model.model_fields.items():
            assert info.alias is None and not info.exclude, (model, name)


def test_a_job_within_the_job_limit_fits_its_message_however_its_text_is_written() -> None:
    # Found by an attack: the wire text escaped every non-ASCII character (six bytes for
    # a three-byte 漢) and put a space after every separator, so a job well inside
    # DECISIONS_MAX_JOB_BYTES (compact UTF-8) was refused for its message's size.
    limit = 100_000
    settings = Settings(max_job_bytes=limit, max_message_bytes=one_job_message_bytes(limit))
    raw = job(state={"body": "漢" * 30_000, "tags": list(range(2_000))})
    text = wire_text(*Client(settings)._checked(raw, "claims", NOW))
    assert json.loads(text)["state"]["body"] == "漢" * 30_000
    # The bytes sent are the compact UTF-8 the limit measures, stamps aside.
    compact = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    assert text == compact
    Client(settings)._wired(raw, "claims", pack=False)  # not refused


def test_a_non_ascii_job_reads_back_from_the_broker_unchanged() -> None:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    raw = job(id="漢-1", state={"body": "漢字 ☕ \u2028 \\ \" é", "emoji": "🦄"})
    Client(Settings(), celery_app=app).submit_batch([raw], reply_to="claims")
    with app.connection_for_read() as conn, conn.SimpleQueue(keys.CELERY_QUEUE) as queue:
        message = queue.get(timeout=5)
        message.ack()
    [sent] = message.decode()[1]["jobs"]
    assert parse_job(sent).state == raw["state"] and sent["id"] == "漢-1"
