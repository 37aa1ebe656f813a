"""Running the real ``decisions`` command in a subprocess, and what its output must not hold."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import DECISIONS, decisions_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

__all__ = ["Outcome", "decisions", "traceback_in"]

#: Key variables stripped from the environment: a test never depends on a developer's keys.
KEY_VARIABLES = ("OPENROUTER_API_KEY", "TYPESAFE_API_KEY", "PARALLEL_API_KEY", "OPENAI_API_KEY")
#: What a traceback, plain or rich, leaves in the output.
TRACEBACK = re.compile(r"Traceback|most recent call last|File \"|\.py:\d+ in |line \d+, in ")


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def decisions(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 120,
    **settings: str,
) -> Outcome:
    """``decisions ARGS`` with only the ``DECISIONS_*`` settings given (and ``env``)."""
    full_env = decisions_env(**settings)
    for name in KEY_VARIABLES:
        full_env.pop(name, None)
    full_env["COLUMNS"] = "200"  # one message line stays one line
    full_env.update(env or {})
    done = subprocess.run(
        [DECISIONS, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def one_job_file(directory: Path) -> str:
    """``one.jsonl`` in ``directory``: the first job of ``examples/tickets.jsonl``; its name."""
    first = (EXAMPLES / "tickets.jsonl").read_text().splitlines()[0]
    (directory / "one.jsonl").write_text(first + "\n")
    return "one.jsonl"


def traceback_in(text: str) -> str | None:
    match = TRACEBACK.search(text)
    return None if match is None else text[max(0, match.start() - 200) : match.end() + 200]
