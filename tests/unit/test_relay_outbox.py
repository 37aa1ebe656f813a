"""The outbox relay publishes each finished job's stored message, row by row, on a real
ledger (SQLite and PostgreSQL): a row it cannot publish (its stream refuses it, its job body
or a time stamp is unreadable) is logged and skipped, and never holds back the rows behind
it, round after round."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from shared.errors import PublishFailed
from shared.settings import Settings
from shared.streams import Publication
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.ledger.models import jobs
from worker.providers import ProviderRegistry
from worker.recovery.reaper import relay_outbox
from worker.testing.faux import FauxProvider

OLD = datetime(2000, 1, 1, tzinfo=UTC)
REFUSED = "refused"




class RefusingSink(MemorySink):
    """Redis refuses every publish to the ``refused`` stream (a key that is not a stream)."""

    def publish(self, item: Publication) -> bool:
        if item.stream == REFUSED:
            raise PublishFailed(f"{item.stream} is not a stream")
        return super().publish(item)


class World:
    def __init__(self, url: str) -> None:
        self.settings = Settings(_env_file=None, ledger_url=url, faux_url=None)
        self.ledger = Ledger.from_settings(self.settings)
        self.ledger.migrate()
        self.faux = FauxProvider()

    def runner(self, sink: MemorySink) -> Runner:
        providers = ProviderRegistry.from_settings(
            self.settings, faux_transport=self.faux.transport()
        )
        return Runner(settings=self.settings, ledger=self.ledger, providers=providers, sink=sink)

    def finished(self, job_id: str, **row: Any) -> None:
        """A job run to its end whose publish never happened (its stored message waits)."""
        asyncio.run(self.runner(MemorySink()).run_one(decide_job(job_id)))
        self.update(job_id, **{"published_at": None, "finished_at": OLD, **row})

    def update(self, job_id: str, **values: Any) -> None:
        with self.ledger.engine.begin() as conn:
            conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(**values))

    def relay(self, sink: MemorySink, **kw: Any) -> int:
        return asyncio.run(relay_outbox(self.ledger, self.runner(sink), **kw))

    def stored(self, job_id: str) -> tuple[str | None, str | None]:
        row = self.ledger.get_job(job_id)
        assert row is not None
        return row.terminal_type, row.terminal_message


@pytest.fixture
def world(ledger_url: str) -> Iterator[World]:
    w = World(ledger_url)
    yield w
    w.ledger.dispose()


def decide_job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "reply_to": "r",
        "state": "A customer writes: where is my parcel?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }


@pytest.mark.parametrize(
    "job_json",
    ["{truncated", '{"id": "a-poison", "reply_to": "r", "questions": "old"}', "[]"],
    ids=["not-json", "another-shape", "not-an-object"],
)
def test_the_stored_message_is_relayed_whatever_the_jobs_body(
    world: World, job_json: str
) -> None:
    world.finished("a-poison", job_json=job_json)
    world.finished("b-good", finished_at=OLD + timedelta(seconds=1))
    sink = MemorySink()
    assert world.relay(sink) == 2
    published = {m.job_id: (m.type, m.message) for m in sink.snapshot()}
    assert published == {"a-poison": world.stored("a-poison"), "b-good": world.stored("b-good")}
    for job_id in published:
        row = world.ledger.get_job(job_id)
        assert row is not None and row.published_at is not None
    assert world.relay(sink) == 0  # published rows are not relayed again
    assert len(sink.snapshot()) == 2 and world.faux.total() == 2  # each sent once, at its run


def test_a_refused_publish_does_not_stop_the_relay(world: World) -> None:
    world.finished("stuck", reply_to=REFUSED)
    world.finished("next", finished_at=OLD + timedelta(seconds=1))
    world.finished("fresh", finished_at=datetime.now(UTC))
    sink = RefusingSink()
    assert world.relay(sink) == 1
    assert [m.job_id for m in sink.snapshot()] == ["next"]
    row = world.ledger.get_job("stuck")
    assert row is not None and row.published_at is None  # relayed again next round


def test_rows_that_keep_failing_do_not_starve_the_rows_behind_them(world: World) -> None:
    """More refused rows than one page of the outbox: the rows after them go all the same."""
    world.finished("good-last", finished_at=OLD + timedelta(seconds=10))
    for i in range(5):
        world.finished(f"stuck-{i}", reply_to=REFUSED, finished_at=OLD + timedelta(seconds=i))
    sink = RefusingSink()
    for _ in range(2):  # and every round
        world.relay(sink, page_size=2)
    assert [m.job_id for m in sink.snapshot()] == ["good-last"]


def test_a_relay_that_fails_on_one_row_logs_it_and_goes_on(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.finished("a-odd")
    world.finished("b-good", finished_at=OLD + timedelta(seconds=1))
    sink = MemorySink()
    runner = world.runner(sink)
    real = runner.delivery.publish

    async def publish(row: Any, stream: str) -> str:
        if row.job_id == "a-odd":
            raise ValueError("something this row alone trips over")
        return await real(row, stream)

    monkeypatch.setattr(runner.delivery, "publish", publish)
    with capture_logs() as logs:
        assert asyncio.run(relay_outbox(world.ledger, runner)) == 1
    assert [m.job_id for m in sink.snapshot()] == ["b-good"]
    [skipped] = [e for e in logs if e["event"] == "reaper.relay_failed"]
    assert skipped["job_id"] == "a-odd" and skipped["error"] == "ValueError"


@pytest.mark.parametrize(
    "finished_at", ["yesterday", 1700000000, "2024-13-45 99:00:00"], ids=["word", "int", "bad"]
)
def test_a_time_stamp_sqlite_cannot_parse_does_not_stop_the_relay(
    tmp_path: Path, finished_at: object
) -> None:
    """SQLite keeps whatever was written (by hand, by a script): one row whose time stamp
    does not parse is logged (its id, never its body) and the rest are relayed."""
    world = World(f"sqlite:///{tmp_path / 'ledger.db'}")
    world.finished("a-poison")
    world.finished("b-good", finished_at=OLD + timedelta(seconds=1))
    with world.ledger.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET finished_at = :v WHERE job_id = 'a-poison'"),
            {"v": finished_at},
        )
    sink = MemorySink()
    with capture_logs() as logs:
        assert world.relay(sink) == 1
    assert [m.job_id for m in sink.snapshot()] == ["b-good"]
    unreadable = [e for e in logs if e["event"] == "reaper.relay_unreadable"]
    assert [(e["job_id"], e["column"]) for e in unreadable] == [("a-poison", "finished_at")]
    assert all("questions" not in str(e) for e in logs)
