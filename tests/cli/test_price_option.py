"""``--price`` of the dry run names what is wrong with it, exit 2 (found by an attack: a price
for a provider there is none of was ignored without a word, and a price that is not a number
was refused in float()'s words: "could not convert string to float")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import decisions, one_job_file, traceback_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("price", "said"),
    [
        ("nosuch=1", "--price nosuch=1: there is no provider 'nosuch'; the providers are"),
        ("openrouter=abc", "'openrouter=abc': a price is a number of USD"),
    ],
)
def test_a_price_that_cannot_apply_is_refused_by_name(
    tmp_path: Path, price: str, said: str
) -> None:
    one_job_file(tmp_path)
    done = decisions(
        "submit", "one.jsonl", "--reply-to", "r", "--dry-run", "--price", price, cwd=tmp_path
    )
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    assert said in done.stderr, done.stderr
    assert "could not convert" not in done.output
