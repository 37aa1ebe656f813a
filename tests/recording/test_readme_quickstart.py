"""README's "Quick start" and "Running a fleet" work as written: their shell blocks, in order,
run in a copy of the repository as a newcomer would paste them. Only the addresses change
(this machine's Redis database, PostgreSQL schema and free ports for 6379, 5432/test, 8765
and 8700), and the ``.venv`` is the one ``make demo`` would leave, built from the shared test
environment instead of downloading (``make`` then takes it as installed).

A block that is one long-running command (``decisions faux serve``, ``worker``, ``console``)
runs in the background, as in "a terminal of its own", with the ``.`` and ``export`` lines
of the blocks before it; every other block runs with ``bash -e`` and must exit 0."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import wait_http
from tests.support.services import (
    REDIS_HOST,
    REDIS_PORT,
    free_port,
    postgres_schema,
    redis_database,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LONG_RUNNING = re.compile(r"^decisions (faux serve|worker|console)\b")
#: What the test does not run, and why.
NOT_RUN = {"make test": "the whole test suite: CI runs it"}
REDIS_DB = 13


def section(title: str) -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(f"## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def shell_blocks(title: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", section(title), flags=re.DOTALL)


def _commands(block: str) -> list[str]:
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The repository's files in a fresh directory, with the .venv ``make demo`` leaves."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    root = tmp_path / "clone"
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # This copy's code first, then the packages of the shared environment.
    (site / "decisions-test.pth").write_text(f"{root}\n{sysconfig.get_paths()['purelib']}\n")
    script = venv / "bin" / "decisions"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom worker.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    # The shared environment has every extra: what `make demo` and `make fleet` install.
    for stamp in (".installed", ".installed-fleet"):
        (venv / stamp).touch()
    return root


@pytest.fixture
def machine(clone: Path) -> Iterator[dict[str, str]]:
    """This machine's stand-ins for the README's addresses (old text -> new)."""
    with redis_database(REDIS_DB), postgres_schema("readme") as pg_url:
        yield {
            "redis://127.0.0.1:6379/0": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "postgresql+psycopg://postgres@127.0.0.1:5432/test": pg_url,
            "8765": str(free_port()),
        }


class Terminals:
    """The shells a newcomer opens: a history of environment lines, background processes."""

    def __init__(self, cwd: Path, replace: dict[str, str]) -> None:
        self.cwd = cwd
        self.replace = replace
        self.preamble: list[str] = []
        self.background: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("DECISIONS_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        # The console's port (the README names no port for it) and no key reaches anything.
        self.env["DECISIONS_CONSOLE_PORT"] = str(free_port())
        self.env["PATH"] = os.pathsep.join(
            p for p in self.env["PATH"].split(os.pathsep) if ".venv" not in p
        )

    def _text(self, block: str) -> str:
        for old, new in self.replace.items():
            block = block.replace(old, new)
        return block

    def run(self, block: str, timeout_s: float = 600) -> str:
        commands = [c for c in _commands(self._text(block)) if c not in NOT_RUN]
        script = "\n".join(["set -e", *self.preamble, *commands])
        if len(commands) == 1 and LONG_RUNNING.match(commands[0]):
            log = (self.cwd / f"terminal-{len(self.background)}.log").open("wb")
            proc = subprocess.Popen(
                ["bash", "-c", script.replace(commands[0], f"exec {commands[0]}")],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self.background.append((commands[0], proc))
            return ""
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        assert done.returncode == 0, f"{commands}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        self.preamble += [c for c in commands if c.startswith((". ", "export "))]
        return done.stdout + done.stderr

    def stop(self) -> None:
        for _, proc in reversed(self.background):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_the_judgments_example_is_the_examples_file() -> None:
    blocks = re.findall(
        r"```json\n(.*?)```",
        section("Sift, route, verify, and cost before submit"),
        flags=re.DOTALL,
    )
    assert blocks[0] == (ROOT / "examples" / "judgments.jsonl").read_text()


def test_the_quick_start_runs_as_written(clone: Path) -> None:
    blocks = shell_blocks("Quick start")
    assert blocks and "make demo" in blocks[0] and ". .venv/bin/activate" in blocks[0]
    terminals = Terminals(clone, {})
    output = terminals.run(blocks[0])
    assert "no request leaves this machine" in output
    assert (clone / "out" / "results.jsonl").stat().st_size > 0
    replies = (clone / "out-judgments" / "results.jsonl").read_text()
    assert '"mail-1"' in replies and '"t-9"' in replies


def test_the_fleet_installs_the_extras_its_terminals_need_before_starting_them() -> None:
    # The clone above has every extra (stamped as installed), so only this says that a
    # newcomer who ran `make demo` (the package alone) gets the console's extra before
    # `decisions console` is started in its terminal.
    text = section("Running a fleet")
    console_block = text.index("decisions console")
    installs = [
        c
        for block in shell_blocks("Running a fleet")
        if text.index(block) < console_block
        for c in _commands(block)
    ]
    assert any(c in ("make fleet-install", "make fleet") or "[console" in c for c in installs)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^fleet-install: \$\(VENV\)/\.installed-fleet$", makefile, re.M)


def _fleet_blocks() -> dict[str, list[str]]:
    """The section's blocks by role: the environment, the terminals, ``make fleet``, use."""
    blocks = shell_blocks("Running a fleet")
    roles: dict[str, list[str]] = {
        "environment": [blocks[0]],
        "terminals": [],
        "make": [],
        "use": [],
    }
    for block in blocks[1:]:
        commands = _commands(block)
        if len(commands) == 1 and LONG_RUNNING.match(commands[0]):
            roles["terminals"].append(block)
        elif commands == ["make fleet"]:
            roles["make"].append(block)
        else:
            roles["use"].append(block)
    assert len(roles["use"]) == 1 and len(roles["make"]) == 1, roles
    return roles


@pytest.mark.timeout(900)  # three processes start and a batch of 240 runs, on a busy machine
def test_running_a_fleet_in_terminals_runs_as_written(clone: Path, machine: dict[str, str]) -> None:
    blocks = _fleet_blocks()
    terminals = Terminals(clone, machine)
    faux = f"http://127.0.0.1:{machine['8765']}"
    try:
        terminals.run(blocks["environment"][0])  # the environment, then `decisions migrate`
        for block in blocks["terminals"]:
            terminals.run(block)
        assert [name.split()[1] for name, _ in terminals.background] == [
            "faux",
            "worker",
            "console",
        ]
        wait_http(f"{faux}/_faux/health", terminals.background[0][1], timeout_s=180)
        output = terminals.run(blocks["use"][0])
        assert "every job has replied" in output
        assert (clone / "replies.jsonl").read_text().count("\n") >= 240
        # The worker asked the faux server (DECISIONS_FAUX_URL was set before it started).
        assert sum(httpx.get(f"{faux}/_faux/requests").json().values()) >= 1
    finally:
        terminals.stop()
        for log in sorted(clone.glob("terminal-*.log")):
            print(log.name, log.read_text(errors="replace")[-2000:])


@pytest.mark.timeout(900)
def test_make_fleet_starts_and_stops_a_local_fleet(clone: Path, machine: dict[str, str]) -> None:
    blocks = _fleet_blocks()
    terminals = Terminals(clone, machine)
    faux = f"http://127.0.0.1:{machine['8765']}"
    terminals.run(blocks["environment"][0])
    terminals.run(blocks["make"][0])
    pids = {
        name: int((clone / ".fleet" / f"{name}.pid").read_text())
        for name in ("faux", "worker", "console")
    }
    try:
        until = time.monotonic() + 180
        while time.monotonic() < until:
            try:
                if httpx.get(f"{faux}/_faux/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        output = terminals.run(blocks["use"][0])
        assert "every job has replied" in output
        assert sum(httpx.get(f"{faux}/_faux/requests").json().values()) >= 1
    finally:
        stopped = terminals.run("make fleet-stop")
    assert "`make fleet-stop`" in section("Running a fleet")
    for name, pid in pids.items():
        assert f"stopped {name}" in stopped
        assert not _running(pid), name
    assert (clone / ".fleet" / "worker.log").stat().st_size > 0


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's parent here may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
