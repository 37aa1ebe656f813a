"""A PostgreSQL ledger that turns read-only while a worker holds a paid answer (a failover to
a demoted primary, a managed database protecting a full disk): the answer is held and
written once the server takes writes again, and the request is sent once.

psycopg files "cannot execute ... in a read-only transaction" (SQLSTATE 25006) under
``InternalError``; it was read as a bug, and the answer dropped, its call left ``claimed``
to be booked unknown and escalated. The server is a private one (``own_postgres``):
``ALTER SYSTEM`` reaches every session, pooled ones included, as the attack's did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from shared.settings import Settings
from tests.support.ownservers import OwnPostgres, own_postgres
from worker.delivery.outage import ledger_outage
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger, LedgerUnavailable
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

pytestmark = pytest.mark.integration

#: Failed writes of the held answer before the server takes writes again.
READ_ONLY_FOR = 3


@pytest.fixture
def private_postgres() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


def set_read_only(server: OwnPostgres, on: bool) -> None:
    server.alter_system(f"default_transaction_read_only = {'on' if on else 'off'}")


class ReadOnlyWhileAnswering(httpx.AsyncBaseTransport):
    """The faux, with the ledger's server turned read-only while the request is in flight:
    the claim was committed, the answer comes back to a ledger that cannot take it."""

    def __init__(self, faux: FauxProvider, server: OwnPostgres) -> None:
        self.inner = faux.transport()
        self.server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        set_read_only(self.server, True)
        return await self.inner.handle_async_request(request)


def test_an_answer_held_through_a_read_only_ledger_is_written_once_writable(
    private_postgres: OwnPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.delivery.outage as outage

    monkeypatch.setattr(outage, "RECORD_RETRY_FIRST_S", 0.05)
    settings = Settings(_env_file=None, ledger_url=private_postgres.url, faux_url=None)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    faux = FauxProvider()
    failures: list[BaseException] = []

    def on_outage(sender: Any = None, error: Any = None, **_: Any) -> None:
        failures.append(error)
        if len(failures) == READ_ONLY_FOR:
            set_read_only(private_postgres, False)

    ledger_outage.connect(on_outage, weak=False)
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(
            settings, faux_transport=ReadOnlyWhileAnswering(faux, private_postgres)
        ),
        sink=MemorySink(),
    )
    job = {
        "id": "held-read-only",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        "reply_to": "r",
        "state": "A customer writes: where is my parcel?",
    }
    try:
        with capture_logs() as logs:
            assert asyncio.run(runner.run_one(job)) == "result"
    finally:
        ledger_outage.disconnect(on_outage)
        set_read_only(private_postgres, False)
        ledger.dispose()

    assert faux.total() == 1
    assert len(failures) >= READ_ONLY_FOR
    assert all(isinstance(f, LedgerUnavailable) for f in failures)
    assert "read-only transaction" in str(failures[0])
    assert not [e for e in logs if e["event"] == "call.crashed"]
    reopened = Ledger(private_postgres.url)
    try:
        assert [c.status for c in reopened.calls(job["id"])] == ["answered"]
        stored = reopened.get_job(job["id"])
        assert stored is not None and stored.terminal_type == "result"
    finally:
        reopened.dispose()
