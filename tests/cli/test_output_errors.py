"""Where ``decisions`` writes its output cannot take it: a full device (``>/dev/full``) is one
line, as other command-line tools say it ("decisions: write error: No space left on device"),
with a non-zero status; a pipe whose reader is gone (``| head -0``) ends the command quietly,
also non-zero. Neither is "a bug" nor a traceback, whichever command it was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.support import traceback_in
from tests.support.processes import DECISIONS, decisions_env

FULL = Path("/dev/full")
#: Commands that print without a server: the version, the help, and what they list.
COMMANDS = [
    ("--version",),
    ("--help",),
    ("settings",),
    ("schema", "job"),
    ("providers",),
    ("settings", "--help"),
]
IDS = [" ".join(c) for c in COMMANDS]


def _run(args: tuple[str, ...], stdout: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DECISIONS, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=decisions_env(),
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_output_to_a_full_device_is_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    with FULL.open("w") as full:
        done = _run(args, full.fileno(), tmp_path)
    assert traceback_in(done.stderr) is None, done.stderr
    assert done.stderr.splitlines() == ["decisions: write error: No space left on device"]
    assert done.returncode == 1


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_output_to_a_closed_pipe_ends_quietly(args: tuple[str, ...], tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -0`: the reader is gone before anything is written
    try:
        done = _run(args, write_end, tmp_path)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 1
