"""A Redis URL the settings can tell is wrong is refused with them, naming the variable and
the fix, exit 2, whichever command reads it: found by an attack, a port out of range or not
a number, and a TLS option on a redis:// URL (README's own ?ssl_cert_reqs=none), ended in
"unexpected error: ValueError/TypeError ... this is a bug" from status and submit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import decisions, one_job_file, traceback_in

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: Nothing listens there: a case is refused before any server is reached.
NOWHERE = "redis://127.0.0.1:1/0"
COMMANDS = [("status",), ("submit", "one.jsonl", "--reply-to", "r1")]
VARIABLES = ["DECISIONS_REDIS_URL", "DECISIONS_BROKER_URL"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("redis-url-checks")
    one_job_file(root)
    return root


def _refused(workdir: Path, args: tuple[str, ...], variable: str, url: str) -> list[str]:
    settings = {"redis_url": NOWHERE, "broker_url": NOWHERE}
    settings[variable.removeprefix("DECISIONS_").lower()] = url
    done = decisions(*args, cwd=workdir, timeout_s=60, **settings)
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert "bug" not in done.output, done.output
    assert done.code == 2, done.output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, done.stderr
    assert f"{variable}=" in lines[0], lines
    return lines


@pytest.mark.parametrize("args", COMMANDS)
@pytest.mark.parametrize("variable", VARIABLES)
@pytest.mark.parametrize("port", ["99999", "notaport"])
def test_a_port_that_is_no_port_is_refused_naming_the_variable(
    workdir: Path, args: tuple[str, ...], variable: str, port: str
) -> None:
    lines = _refused(workdir, args, variable, f"redis://127.0.0.1:{port}/10")
    assert f"port {port!r}" in lines[0] and "1 to 65535" in lines[0], lines


@pytest.mark.parametrize("args", COMMANDS)
@pytest.mark.parametrize("variable", VARIABLES)
@pytest.mark.parametrize("option", ["ssl_cert_reqs=none", "ssl_ca_certs=/etc/ssl/ca.pem"])
def test_a_tls_option_on_a_plain_redis_url_is_refused_naming_the_variable(
    workdir: Path, args: tuple[str, ...], variable: str, option: str
) -> None:
    lines = _refused(workdir, args, variable, f"{NOWHERE}?{option}")
    name = option.partition("=")[0]
    assert f"?{name}=" in lines[0] and "rediss://" in lines[0], lines
