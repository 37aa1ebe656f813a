"""``decisions run`` sends nothing off this machine unless ``--live``: every provider a job
names is answered by the faux, with placeholder keys, and the run says so."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.support import decisions

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: The README's sift, route and verify examples (README.md, "Sift, route, verify").
EXAMPLES = ROOT / "examples" / "judgments.jsonl"


class Trap:
    """A loopback port standing in for a real provider host: counts the connections made."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def trap() -> Iterator[Trap]:
    trap = Trap()
    yield trap
    trap.close()


def _hosts_at(url: str) -> dict[str, str]:
    return {
        "openrouter_base_url": f"{url}/api",
        "typesafe_base_url": url,
        "parallel_base_url": url,
        "openai_base_url": url,
    }


def _replies(out: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for name in ("results", "escalations", "rejected")
        for line in (out / f"{name}.jsonl").read_text().splitlines()
    ]


def test_the_readme_judgments_are_answered_here_with_real_keys_set(
    tmp_path: Path, trap: Trap
) -> None:
    keys = {"PARALLEL_API_KEY": "real-key-canary", "OPENROUTER_API_KEY": "real-key-canary"}
    done = decisions(
        "run", str(EXAMPLES), "--out", "out", cwd=tmp_path, env=keys, **_hosts_at(trap.url)
    )
    assert done.code == 0, done.output
    assert "no request leaves this machine" in done.stdout
    assert trap.connections == 0
    replies = _replies(tmp_path / "out")
    assert {r["job_id"] for r in replies} == {"mail-1", "t-9", "t-10"}
    # Answered by the faux: nothing escalated for a missing key or an unreachable host.
    assert not [r for r in replies if r["type"] == "escalation" and r["reason"] == "provider_error"]
    kinds = {r["job_id"]: r["type"] for r in replies}
    assert kinds["mail-1"] == "result" and kinds["t-9"] == "result"


def test_live_asks_the_real_hosts(tmp_path: Path, trap: Trap) -> None:
    job = {
        "id": "live-1",
        "provider": "parallel",
        "state": "x",
        "questions": {"q": {"type": "noul", "instructions": "?"}},
    }
    (tmp_path / "one.jsonl").write_text(json.dumps(job) + "\n")
    done = decisions(
        "run",
        "one.jsonl",
        "--live",
        "--out",
        "out",
        cwd=tmp_path,
        env={"PARALLEL_API_KEY": "k"},
        max_transport_attempts="1",
        **_hosts_at(trap.url),
    )
    assert done.code == 0, done.output
    assert "live" in done.stdout
    assert trap.connections >= 1
