"""The commands, as real processes: ``decisions record --dir DIR -- COMMAND`` records what
COMMAND's providers receive; ``decisions faux serve --replay DIR`` answers from it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from shared.canonical import canonical_bytes
from tests.support.processes import DECISIONS, decisions_env, faux_server
from worker.cli import app
from worker.providers.observers import REPLAY_MISS_HEADER, observing
from worker.testing.faux import FauxServer
from worker.testing.recording import Recorder

from .support import MODEL, decide, questions, recordings, request, settings_at

#: A user's program: one OpenRouter decision, then exits with the code it is given.
PROGRAM = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
import httpx
import pytest
from typer.testing import CliRunner
from shared.settings import get_settings
from worker.providers import DecisionRequest, ProviderRegistry

async def main():
    async with httpx.AsyncClient() as http:
        registry = ProviderRegistry.from_settings(get_settings(), http=http)
        result = await registry.get("openrouter").decide(
            DecisionRequest(state=sys.argv[1], questions={
                "is_urgent": {"type": "noul", "instructions": "Does this convey urgency?"}},
                model="typesafe/jev-1.14"),
            datetime.now(UTC) + timedelta(seconds=10))
        print(result.receipt.request_sha256)

asyncio.run(main())
sys.exit(int(sys.argv[2]))
"""


def test_record_runs_the_command_with_recording_on(tmp_path: Path) -> None:
    canary = f"sk-canary-{uuid.uuid4()}"
    directory = tmp_path / "recordings"
    with FauxServer() as host:
        env = decisions_env(openrouter_base_url=f"{host.url}/api")
        env["OPENROUTER_API_KEY"] = canary
        done = subprocess.run(
            [DECISIONS, "record", "--dir", str(directory), "--secret-field", "usage",
             "--", sys.executable, "-c", PROGRAM, "payouts failing", "3"],
            env=env, capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 3, done.stderr
    digest = done.stdout.strip().splitlines()[-1]
    assert "recorded 1 response(s)" in done.stderr
    doc = recordings(directory)[digest]
    assert doc["response"]["status"] == 200 and doc["response"]["body"]["usage"] == "[redacted]"
    assert canary not in (directory / f"{digest}.json").read_text()


def test_record_without_a_command_says_how(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["record", "--dir", str(tmp_path)])
    assert done.exit_code == 2 and "decisions record --dir DIR -- COMMAND" in done.output


def test_faux_serve_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    directory = tmp_path / "recordings"
    state = "Help! My payouts have been failing for 3 days."
    body = {"model": MODEL, "state": state, "questions": questions()}
    with FauxServer() as host, observing(Recorder(directory)):
        decide(settings_at(host.url), "openrouter", request(state=state, model=MODEL))
    [(digest, doc)] = recordings(directory).items()
    log = tmp_path / "faux.log"
    with faux_server("--replay", str(directory), log=log) as url, httpx.Client(
        base_url=url, headers={"Authorization": "Bearer x"}
    ) as client:
        hit = client.post("/api/v1/systemone", content=canonical_bytes(body))
        miss = client.post(
            "/api/v1/systemone", content=canonical_bytes({**body, "model": "other/model"})
        )
    assert hit.status_code == 200 and hit.json() == doc["response"]["body"]
    assert miss.status_code == 404
    assert f"the closest recorded request is {digest}" in miss.headers[REPLAY_MISS_HEADER]
    text = log.read_text()
    assert "replaying 1 recording(s)" in text
    assert miss.json()["message"] in text, "the server's log names the miss too"
