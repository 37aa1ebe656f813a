"""``decisions escalations resolve`` refuses an answer nested too deep in one line, exit 2,
before it reaches Redis, as the console and ``decisions submit`` do. Found by an attack: a
5,000-deep array (by --answer, --answer-file or stdin) ended in "unexpected error:
RecursionError ... a bug"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import decisions, traceback_in


@pytest.mark.parametrize("depth", [5000, 150])
@pytest.mark.parametrize("how", ["--answer", "--answer-file"])
def test_an_answer_nested_too_deep_is_refused_in_one_line(
    tmp_path: Path, depth: int, how: str
) -> None:
    answer = "[" * depth + "]" * depth
    given = answer
    if how == "--answer-file":
        given = str(tmp_path / "answer.json")
        Path(given).write_text(answer)
    done = decisions(
        "escalations", "resolve", "1-0", how, given, "--reviewer", "ann",
        cwd=tmp_path, redis_url="redis://127.0.0.1:1/0",  # never reached
    )  # fmt: skip
    assert traceback_in(done.output) is None, done.output
    assert "unexpected error" not in done.output, done.output
    assert done.code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nested" in lines[0] and how in lines[0], done.stderr
