"""A redelivered job whose image refs cannot be fetched again keeps its one terminal message.

Refs are fetched on every delivery, before the job is opened. A first delivery that cannot
fetch them rejects the job: nothing was claimed, so nothing was sent. A redelivery (a worker
died, or published and died before its ack) found the store down and rejected the job too:
a second terminal message after the job's result, or a ``rejected`` telling the producer to
submit again a job whose call may have been paid for. Now it replays what the job stored,
or escalates it with what its calls stored; nothing is sent again.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.replies import parse_reply
from shared.settings import Settings
from tests.images.test_image_jobs import png_b64
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer

PNG = base64.b64decode(png_b64(400, 300))


class _Store(http.server.BaseHTTPRequestHandler):
    up: list[bool]

    def do_GET(self) -> None:
        body, status = (PNG, 200) if self.up[0] else (b"down", 503)
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class World:
    def __init__(self, tmp_path: Path, faux_url: str, prefix: str, up: list[bool]) -> None:
        self.up = up
        self.prefix = prefix
        self.settings = Settings(
            _env_file=None,
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
            faux_url=faux_url,
            image_stores=[prefix],
        )
        self.ledger = Ledger.from_settings(self.settings)
        self.ledger.migrate()
        self.sink = MemorySink()

    def deliver(self, raw: dict[str, Any]) -> list[Any]:
        """One delivery of ``raw``: the replies it published."""
        self.sink = MemorySink()
        runner = Runner(
            settings=self.settings,
            ledger=self.ledger,
            providers=ProviderRegistry.from_settings(self.settings),
            sink=self.sink,
        )
        asyncio.run(asyncio.wait_for(runner.run_one(raw), 60))
        return [parse_reply(p.message) for p in self.sink.snapshot()]

    def sql(self, statement: str, **values: Any) -> None:
        with self.ledger.engine.begin() as conn:
            conn.execute(sa.text(statement), values)

    def job(self, job_id: str) -> dict[str, Any]:
        return {
            "id": job_id,
            "kind": "route",
            "reply_to": "replies",
            "model": "faux-1",
            "state": {"invoice": "<a>"},
            "routes": {"pay": None, "hold": None},
            "images": {"a": {"format": "png", "ref": self.prefix + "a.png"}},
        }


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, FauxServer]]:
    up = [True]
    handler = type("Handler", (_Store,), {"up": up})
    store = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    prefix = f"http://127.0.0.1:{store.server_address[1]}/imgs/"
    try:
        with FauxServer() as faux:
            built = World(tmp_path, faux.url, prefix, up)
            yield built, faux
            built.ledger.dispose()
    finally:
        store.shutdown()


def _sent(faux: FauxServer) -> int:
    """Decision requests the faux has read."""
    return sum(faux.provider.requests().values())


def test_a_first_delivery_that_cannot_fetch_is_rejected_naming_the_ref(
    world: tuple[World, FauxServer],
) -> None:
    w, _ = world
    w.up[0] = False
    (reply,) = w.deliver(w.job("first"))
    assert reply.type == "rejected"
    assert [p["field"] for p in reply.problems] == ["images.a.ref"]


def test_a_finished_job_redelivered_with_the_store_down_replays_its_message(
    world: tuple[World, FauxServer],
) -> None:
    w, _ = world
    (first,) = w.deliver(w.job("done"))
    assert first.type == "result", first
    w.up[0] = False
    (again,) = w.deliver(w.job("done"))
    assert again.model_dump() == first.model_dump()


def test_an_open_job_with_a_call_redelivered_with_the_store_down_escalates_sending_nothing(
    world: tuple[World, FauxServer],
) -> None:
    w, faux = world
    (first,) = w.deliver(w.job("open"))
    assert first.type == "result", first
    sent = _sent(faux)
    assert sent == 1
    # As a delivery that recorded its call and died before the job's terminal message.
    w.sql(
        "UPDATE jobs SET terminal_type = NULL, terminal_reason = NULL, "
        "terminal_message = NULL, finished_at = NULL, published_at = NULL WHERE job_id = 'open'"
    )
    w.up[0] = False
    (again,) = w.deliver(w.job("open"))
    assert again.type == "escalation", again
    assert again.reason == "decision_interrupted"
    assert "images.a.ref" in again.detail
    assert len(again.receipts) == 1
    assert again.context["state"] == {"invoice": "<a>"}
    assert _sent(faux) == sent
    # The job is finished now: one more redelivery replays that escalation.
    (third,) = w.deliver(w.job("open"))
    assert third.model_dump() == again.model_dump()
