"""A Redis URL that does not parse is shown with its password masked, as one that parses is
(found by an attack: ``redis:/:PW@host`` was printed whole by the very error that said it
was not a Redis URL, twice by ``decisions status``, and a submit whose jobs were all
rejected ended in "unexpected error: IndexError ... a bug")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shared.scrub import mask_url
from tests.cli.support import decisions, one_job_file, traceback_in
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: This test's own Redis database (emptied around each case that reaches it).
DB = 13
CANARY = "secret-canary"
#: One slash short, and the colon missing: neither has a ``scheme://``.
TYPOS = (
    f"redis:/:{CANARY}@127.0.0.1:6379/{DB}",
    f"redis//:{CANARY}@127.0.0.1:6379/{DB}",
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("url-secrets")
    one_job_file(root)
    (root / "rejected.jsonl").write_text(json.dumps({"id": "t-1", "state": "x"}) + "\n")
    shutil.copy(ROOT / "examples" / "tickets.jsonl", root / "tickets.jsonl")
    return root


@pytest.mark.parametrize("url", TYPOS)
def test_a_url_that_does_not_parse_is_masked(url: str) -> None:
    shown = mask_url(url, keep_user=True)
    assert CANARY not in shown and shown.endswith("@127.0.0.1:6379/13"), shown
    assert mask_url("redis:/h/0?password=pw&db=1") == "redis:/h/0?password=***&db=1"
    assert mask_url("redis:/oops") == "redis:/oops"  # nothing to hide: shown as it is


@pytest.mark.parametrize("url", TYPOS)
@pytest.mark.parametrize(
    ("variable", "args", "code", "says"),
    [
        ("redis_url", ("status",), 2, "not a Redis URL: DECISIONS_REDIS_URL="),
        ("broker_url", ("status",), 1, "DECISIONS_BROKER_URL="),
        ("broker_url", ("submit", "one.jsonl", "--reply-to", "r1"), 2, "names no host"),
        ("broker_url", ("submit", "rejected.jsonl", "--reply-to", "r1"), 0, "rejected 1"),
    ],
)
def test_no_command_prints_the_password_of_a_url_that_does_not_parse(
    workdir: Path, url: str, variable: str, args: tuple[str, ...], code: int, says: str
) -> None:
    settings = {"redis_url": redis_url(DB), "broker_url": redis_url(DB), variable: url}
    with redis_database(DB):
        done = decisions(*args, cwd=workdir, ledger_url="sqlite:///./ledger.db", **settings)
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert CANARY not in done.output, done.output
    assert says in done.output, done.output
    assert done.code == code, done.output
