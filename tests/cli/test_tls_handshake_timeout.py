"""A ``rediss://`` URL on a server that speaks plain Redis fails in seconds, naming the
variable and the likely fix (found by an attack: ``decisions submit`` stayed in the TLS
handshake for good, with no output; redis-py and kombu bound no connect unless told to,
``shared.redis_connect``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cli.support import decisions, one_job_file, traceback_in
from tests.support.services import REDIS_HOST, REDIS_PORT, redis_database, redis_url

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: This test's own Redis database (a plain one: no TLS).
DB = 13
TLS_ON_PLAIN = f"rediss://{REDIS_HOST}:{REDIS_PORT}/{DB}?ssl_cert_reqs=none"
#: Well past the connect timeout (10 s), well short of "for good".
LIMIT_S = 45


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tls-handshake")
    one_job_file(root)
    return root


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("submit", "one.jsonl", "--reply-to", "r1"), "broker_url"),
        (("submit", "one.jsonl", "--reply-to", "r1"), "redis_url"),
        (("escalations", "list"), "redis_url"),
    ],
    ids=["submit-broker", "submit-streams", "escalations-streams"],
)
def test_tls_against_a_plain_redis_times_out_naming_the_variable(
    workdir: Path, args: tuple[str, ...], field: str
) -> None:
    settings = {"redis_url": redis_url(DB), "broker_url": redis_url(DB), field: TLS_ON_PLAIN}
    variable = f"DECISIONS_{field.upper()}"
    started = time.monotonic()
    with redis_database(DB):
        done = decisions(*args, cwd=workdir, timeout_s=LIMIT_S, **settings)
    assert time.monotonic() - started < LIMIT_S
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 1, done.output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, done.stderr
    assert f"{variable}={TLS_ON_PLAIN}" in lines[0], lines
    assert f"{variable} asks for TLS (rediss://)" in lines[1], lines
