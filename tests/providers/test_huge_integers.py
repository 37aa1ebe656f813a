"""A 200 answer holding an integer no float can hold (JSON allows it; Python reads it as an
int) is an ``invalid_response``: paid, never sent again, said in one line (found by an
attack). Before, ``math.isfinite`` raised ``OverflowError`` on it in the answer and usage
checks, which left the provider as a bug: the paid, answered call was booked ``unknown`` at
no cost with no attempt, and ``decisions run --live`` printed a traceback.

Real loopback servers (``tests.providers.loopback``); the worker's own client."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from shared.errors import DecisionProviderError
from tests.providers.loopback import LoopbackServer, Reply
from worker.http.connection_pool import sharded_client
from worker.providers import (
    DecisionProvider,
    DecisionRequest,
    OpenAIDecisionsProvider,
    ParallelProvider,
    SystemOneConfig,
    SystemOneProvider,
    TransportPolicy,
)

BIG = "1" + "0" * 400  # 401 digits: under Python's 4,300-digit limit, over any float
POLICY = TransportPolicy(timeout_s=5.0, max_attempts=1)
KEY = "sk-huge-int-canary"
Q = {"u": {"type": "noul", "instructions": "Urgent?"}}
NOUL = '{"answers":{"u":{"type":"noul","noul":0.9}}%s}'
OPENAI = '{"answers":[{"type":"predicate","name":"u","probability":%s}]%s}'

Build = Callable[[httpx.AsyncClient, str], DecisionProvider]


def typesafe(http: httpx.AsyncClient, url: str) -> DecisionProvider:
    config = SystemOneConfig(
        "typesafe", url, "TYPESAFE_API_KEY", default_model="jev",
        price_per_mtok_usd=0.042, request_id_header="x-typesafe-request-id",
    )
    return SystemOneProvider(config, http=http, policy=POLICY)


def openrouter(http: httpx.AsyncClient, url: str) -> DecisionProvider:
    config = SystemOneConfig("openrouter", url, "OPENROUTER_API_KEY", default_model="m")
    return SystemOneProvider(config, http=http, policy=POLICY)


def parallel(http: httpx.AsyncClient, url: str) -> DecisionProvider:
    return ParallelProvider(http=http, base_url=url, policy=POLICY)


def openai(http: httpx.AsyncClient, url: str) -> DecisionProvider:
    return OpenAIDecisionsProvider(http=http, base_url=url, policy=POLICY)


CASES = [
    pytest.param(typesafe, NOUL % f',"usage":{{"input_tokens":{BIG}}}', id="usage.input_tokens"),
    pytest.param(openrouter, NOUL % f',"usage":{{"cost":{BIG}}}', id="usage.cost"),
    pytest.param(typesafe, f'{{"answers":{{"u":{{"type":"noul","noul":{BIG}}}}}}}', id="noul"),
    pytest.param(
        parallel, f'{{"answers":{{"u":{{"type":"noul","noul":0.9,"confidence":{BIG}}}}}}}',
        id="parallel-confidence",
    ),
    pytest.param(openai, OPENAI % ("0.9", f',"usage":{{"input_tokens":{BIG}}}'), id="openai-usage"),
    pytest.param(openai, OPENAI % (BIG, ""), id="openai-probability"),
]


@pytest.mark.parametrize(("build", "body"), CASES)
def test_an_integer_no_float_holds_is_an_invalid_response(
    monkeypatch: pytest.MonkeyPatch, build: Build, body: str
) -> None:
    for var in ("TYPESAFE_API_KEY", "OPENROUTER_API_KEY", "PARALLEL_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(var, KEY)

    async def scenario() -> tuple[object, int]:
        async with LoopbackServer(Reply(body=body.encode())) as server, sharded_client(
            max_connections=2, timeout=5
        ) as http:
            try:
                outcome: object = await build(http, server.url).decide(
                    DecisionRequest(state="s", questions=Q, call_key="job/decide"),
                    datetime.now(UTC) + timedelta(seconds=10),
                )
            except DecisionProviderError as exc:
                outcome = exc
            return outcome, server.requests

    outcome, requests = asyncio.run(scenario())  # an OverflowError escaping fails here
    assert isinstance(outcome, DecisionProviderError)
    assert outcome.code == "invalid_response" and "over 100 digits" in str(outcome)
    # The host answered: paid, booked as failed with its one attempt, never sent again.
    assert outcome.receipt is not None and outcome.receipt.status == "failed"
    assert outcome.receipt.transport_attempts == 1 and requests == 1


TRACEBACK = re.compile(r"Traceback|most recent call last|File \"|line \d+, in ")


def test_decisions_run_live_shows_no_traceback_for_a_hosts_huge_integer(
    tmp_path: Path,
) -> None:
    body = NOUL % f',"usage":{{"input_tokens":{BIG}}}'
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, body], stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None
        port = int(host.stdout.readline())
        job = {"id": "huge-int-0", "kind": "decide", "provider": "typesafe", "state": "s",
               "questions": Q}
        (tmp_path / "jobs.jsonl").write_text(json.dumps(job) + "\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TYPESAFE_API_KEY": KEY,
               "DECISIONS_TYPESAFE_BASE_URL": f"http://127.0.0.1:{port}",
               "DECISIONS_LEDGER_URL": f"sqlite:///{tmp_path}/ledger.db"}
        done = subprocess.run(
            [str(Path(sys.executable).parent / "decisions"), "run", "--live", "jobs.jsonl",
             "--out", "out"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )
    finally:
        host.terminate()
        host.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert not TRACEBACK.search(done.stdout + done.stderr), (done.stdout + done.stderr)[-1500:]
    [line] = (tmp_path / "out" / "escalations.jsonl").read_text().splitlines()
    [receipt] = json.loads(line)["receipts"]
    assert receipt["status"] == "failed" and receipt["transport_attempts"] == 1, receipt


# A keep-alive host answering every request with the body in argv[1] (its port on stdout).
HOST = r'''
import asyncio, sys
BODY = sys.argv[1].encode()
async def handle(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            n = next(int(l.split(b":", 1)[1]) for l in head.split(b"\r\n")
                     if l.lower().startswith(b"content-length:"))
            await r.readexactly(n)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
            await w.drain()
    except Exception:
        w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
'''
