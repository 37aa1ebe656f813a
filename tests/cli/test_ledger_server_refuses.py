"""A PostgreSQL ledger that runs but refuses: every connection slot taken ("sorry, too many
clients already", SQLSTATE 53300), or read-only. The commands said "start the database, or
point DECISIONS_LEDGER_URL at one that answers", though it was running and answering; the
fix they name now is the server's ``max_connections`` and the workers' pools, or the
primary. Each test runs a private server (``own_postgres``): it is restarted or changed.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.cli.support import Outcome, decisions, traceback_in
from tests.support.ownservers import own_postgres
from worker.ledger.engine import PG_MAX_OVERFLOW, PG_POOL_SIZE

pytestmark = pytest.mark.integration

SLOTS = 6


def one_explanation(done: Outcome) -> str:
    assert traceback_in(done.output) is None, traceback_in(done.output)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, done.output[-1500:]
    return " ".join(lines)


def test_no_connection_slot_left_names_max_connections(tmp_path: Path) -> None:
    with own_postgres() as server:
        url = server.url
        assert decisions("migrate", cwd=tmp_path, ledger_url=url).code == 0
        server.alter_system(f"max_connections = {SLOTS}", "superuser_reserved_connections = 0")
        server.stop()
        server.start()  # max_connections is read at start only
        held = [psycopg.connect(url.replace("+psycopg", "")) for _ in range(SLOTS)]
        try:
            unknown = decisions("ledger", "unknown", cwd=tmp_path, ledger_url=url)
            status = decisions("status", "--json", "--timeout", "0.2", cwd=tmp_path, ledger_url=url)
        finally:
            for conn in held:
                conn.close()

    said = one_explanation(unknown)
    assert unknown.code == 1
    assert "max_connections" in said and "DECISIONS_WORKER_CONCURRENCY" in said
    assert f"up to {PG_POOL_SIZE + PG_MAX_OVERFLOW} ledger connections" in said
    assert "start the database" not in said
    why = status.stdout  # status reports each source it could not read, and goes on
    assert "max_connections" in why and "DECISIONS_WORKER_CONCURRENCY" in why, status.output
    assert "start the database" not in why


def test_a_read_only_server_names_the_primary(tmp_path: Path) -> None:
    with own_postgres() as server:
        server.alter_system("default_transaction_read_only = on")
        done = decisions("migrate", cwd=tmp_path, ledger_url=server.url)
    said = one_explanation(done)
    assert done.code == 1
    assert "takes no writes" in said and "the primary" in said
    assert "start the database" not in said
