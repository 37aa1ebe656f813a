"""A key that cannot go in a header (a line break, a control character, a space or a
non-ASCII character inside it) is refused as a missing key is: a ``configuration`` error
naming the variable, never the key, raised before anything is sent. httpx refused it while
building or writing the request, after the call was claimed, which was booked
``outcome_unknown`` ("possibly sent") and escalated ``decision_interrupted`` for every job."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa

from shared.errors import DecisionProviderError
from shared.replies import EscalationMessage, parse_reply
from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import AuthSpec, ProviderRegistry, read_key

VAR = "OPENROUTER_API_KEY"
#: Keys an operator's secret store or editor may leave; each split where it goes wrong.
REFUSED = {
    "line-break": ("Zq3xVb7p", "\n", "Lm9Kt2WnQ"),
    "carriage-return": ("Zq3xVb7p", "\r", "Lm9Kt2WnQ"),
    "tab": ("Zq3xVb7p", "\t", "Lm9Kt2WnQ"),
    "delete": ("Zq3xVb7p", "\x7f", "Lm9Kt2WnQ"),
    "space": ("Zq3xVb7p", " ", "Lm9Kt2WnQ"),
    "non-ascii": ("Zq3xVb7p", "\u00e9 ", "Lm9Kt2WnQ"),
    "non-breaking-space": ("Zq3xVb7p", "\u00a0", "Lm9Kt2WnQ"),
    "beyond-the-bmp": ("Zq3xVb7p", "\U0001f511", "Lm9Kt2WnQ"),
}
#: A variable cannot hold a NUL; a key given in code can.
REFUSED_FIXED = REFUSED | {"nul": ("Zq3xVb7p", "\x00", "Lm9Kt2WnQ")}


def _key(parts: tuple[str, str, str]) -> str:
    return "".join(parts)


@pytest.mark.parametrize("parts", REFUSED.values(), ids=REFUSED.keys())
def test_read_key_refuses_a_key_no_header_can_carry(
    monkeypatch: pytest.MonkeyPatch, parts: tuple[str, str, str]
) -> None:
    monkeypatch.setenv(VAR, f"{_key(parts)}\n")  # the file's final line break is fine
    with pytest.raises(DecisionProviderError) as info:
        read_key(AuthSpec(VAR), "openrouter")
    error = info.value
    assert error.code == "configuration" and error.attempts == 0
    assert VAR in str(error) and "nothing was sent" in str(error)
    for text in (str(error), error.detail, repr(error.args)):
        assert parts[0] not in text and parts[2] not in text


@pytest.mark.parametrize("parts", REFUSED_FIXED.values(), ids=REFUSED_FIXED.keys())
def test_a_fixed_key_no_header_can_carry_is_refused_too(parts: tuple[str, str, str]) -> None:
    with pytest.raises(DecisionProviderError) as info:
        read_key(AuthSpec(VAR, fixed_key=_key(parts)), "openrouter")
    assert info.value.code == "configuration"
    assert parts[0] not in str(info.value) and parts[2] not in str(info.value)


@pytest.mark.parametrize("raw", ["Zq3x/Vb7p+Lm9~Kt2WnQ==\n", "\r\n sk-or-v1-0123!#$%&'*\t"])
def test_visible_ascii_keys_are_read_stripped(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(VAR, raw)
    assert read_key(AuthSpec(VAR), "openrouter") == raw.strip()
    assert read_key(AuthSpec(None, fixed_key=raw), "openrouter") == raw.strip()


def test_decisions_providers_does_not_call_a_refused_key_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, "Zq3xVb7p\nLm9Kt2WnQ")
    monkeypatch.setenv("PARALLEL_API_KEY", "Zq3xVb7pLm9Kt2WnQ\n")
    registry = ProviderRegistry.from_settings(Settings(_env_file=None, faux_url=None))
    try:
        rows = {row["name"]: row for row in registry.describe()}
    finally:
        asyncio.run(registry.aclose())
    assert rows["openrouter"]["key_set"] is False
    assert rows["parallel"]["key_set"] is True


# --- a job: escalated as a missing key is, nothing sent -----------------------------------


class _Host(BaseHTTPRequestHandler):
    """A provider that counts what reaches it (and answers 500, so a sent call shows)."""

    hits: list[str] = []

    def do_POST(self) -> None:
        type(self).hits.append(self.path)
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def host() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    handler = type("Host", (_Host,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _run_job(ledger_url: str, base_url: str, job_id: str) -> tuple[EscalationMessage, Any]:
    settings = Settings(
        _env_file=None, ledger_url=ledger_url, faux_url=None, openrouter_base_url=f"{base_url}/api"
    )
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    sink = MemorySink()
    job = {
        "id": job_id,
        "reply_to": "r",
        "provider": "openrouter",
        "model": "liquid/d1",
        "state": "A customer writes: where is my parcel?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }

    async def run() -> None:
        providers = ProviderRegistry.from_settings(settings)
        try:
            runner = Runner(settings=settings, ledger=ledger, providers=providers, sink=sink)
            await asyncio.wait_for(runner.run_one(job), 30)
        finally:
            await providers.aclose()

    try:
        asyncio.run(run())
        with ledger.engine.begin() as conn:
            call = conn.execute(
                sa.text("SELECT status, error_code FROM calls WHERE job_id = :j"), {"j": job_id}
            ).one()
    finally:
        ledger.dispose()
    reply = parse_reply(sink.snapshot()[-1].message)
    assert isinstance(reply, EscalationMessage), reply
    return reply, tuple(call)


@pytest.mark.parametrize(
    "parts", [REFUSED["line-break"], REFUSED["non-ascii"]], ids=["line-break", "non-ascii"]
)
def test_a_job_with_a_refused_key_is_escalated_as_with_no_key(
    monkeypatch: pytest.MonkeyPatch,
    ledger_url: str,
    host: tuple[str, list[str]],
    parts: tuple[str, str, str],
) -> None:
    base_url, hits = host
    monkeypatch.delenv(VAR, raising=False)
    unset, unset_call = _run_job(ledger_url, base_url, "no-key")
    monkeypatch.setenv(VAR, _key(parts))
    refused, refused_call = _run_job(ledger_url, base_url, "bad-key")
    assert hits == []
    assert refused_call == unset_call == ("not_sent", "configuration")
    assert refused.reason == unset.reason == "provider_error"
    assert refused.kind == unset.kind == "decide"
    (receipt,) = refused.receipts
    assert receipt.status == "not_sent" and receipt.error_code == "configuration"
    assert receipt.transport_attempts == 0
    assert refused.detail is not None and VAR in refused.detail
    assert parts[0] not in refused.model_dump_json() and parts[2] not in refused.model_dump_json()
