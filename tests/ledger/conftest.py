"""Fixtures for the ledger tests: every test runs on SQLite (a tmp file) and on PostgreSQL.

PostgreSQL tests use a schema of their own, created here and dropped afterwards; the URL
points psycopg at it with ``options=-csearch_path=<schema>``, so nothing else is touched.
Set ``DECISIONS_TEST_POSTGRES_URL`` to use another server. Under ``CI=true`` an unreachable
PostgreSQL fails the tests instead of skipping them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import create_engine, exc
from sqlalchemy.engine import make_url

from worker.ledger import Claim, JobRow, Ledger

PG_URL = os.environ.get(
    "DECISIONS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
]


def later(seconds: float = 60.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def judgment_claim(job_id: str) -> dict[str, Any]:
    """A judgment job's claim (``Ledger.claim``'s and ``claim_call``'s keywords, but ``now``):
    it names its delivery's plan, so it locks the job's row for update."""
    return {
        "job_id": job_id,
        "step": "decide",
        "provider": "faux",
        "model": "faux-1",
        "request_sha256": "sha-1",
        "lease_expires": later(150),
        "plan": {"decide": "sha-1"},
    }


def open_jobs(ledger: Ledger, *job_ids: str) -> None:
    for job_id in job_ids:
        ledger.open_job(
            job_id=job_id,
            kind="sift",
            batch=None,
            reply_to="replies:test",
            fingerprint="fp-1",
            deadline=later(120),
            job_json='{"id": "x"}',
        )


def pg_url_for_schema(schema: str, *options: str) -> str:
    url = make_url(PG_URL)
    joined = " ".join([f"-csearch_path={schema}", *options])
    return url.update_query_dict({"options": joined}).render_as_string(hide_password=False)


def _unreachable(reason: str) -> None:
    message = f"PostgreSQL at {make_url(PG_URL).render_as_string()} is not reachable: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema on the test PostgreSQL, dropped (with everything in it) afterwards."""
    schema = f"ledger_test_{uuid4().hex[:12]}"
    admin = create_engine(PG_URL, connect_args={"connect_timeout": 5})
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    except exc.OperationalError as error:
        admin.dispose()
        _unreachable(type(error.orig).__name__ + ": " + str(error.orig).splitlines()[0])
    try:
        yield schema
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture
def pg_admin() -> Iterator[Callable[[str], object]]:
    """Run one SQL statement on the test server outside the ledger's own connections."""
    admin = create_engine(PG_URL, connect_args={"connect_timeout": 5})

    def run(sql: str) -> object:
        with admin.begin() as conn:
            return conn.exec_driver_sql(sql).all()

    yield run
    admin.dispose()


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    schema = request.getfixturevalue("pg_schema")
    return pg_url_for_schema(schema)


@pytest.fixture
def empty_ledger(ledger_url: str) -> Iterator[Ledger]:
    """A Ledger on a database that was never migrated."""
    ledger = Ledger(ledger_url)
    yield ledger
    ledger.dispose()


@pytest.fixture
def ledger(empty_ledger: Ledger) -> Ledger:
    empty_ledger.migrate()
    return empty_ledger


_ids = itertools.count(1)


@pytest.fixture
def new_job(ledger: Ledger) -> Callable[..., JobRow]:
    """Open a job with sensible defaults; every call gets a new id unless given one."""

    def make(
        job_id: str | None = None,
        *,
        batch: str | None = None,
        fingerprint: str = "fp-1",
        deadline: datetime | None = None,
    ) -> JobRow:
        return ledger.open_job(
            job_id=job_id or f"job-{next(_ids)}",
            kind="decide",
            batch=batch,
            reply_to="replies:test",
            fingerprint=fingerprint,
            deadline=deadline or later(120),
            job_json='{"id": "x"}',
        )

    return make


@pytest.fixture
def claim(ledger: Ledger) -> Callable[..., Claim]:
    def make(
        job_id: str,
        step: str = "decide",
        *,
        lease_expires: datetime | None = None,
        provider: str = "faux",
        request_sha256: str = "sha-1",
    ) -> Claim:
        return ledger.claim(
            job_id=job_id,
            step=step,
            provider=provider,
            model="faux-1",
            request_sha256=request_sha256,
            lease_expires=lease_expires or later(150),
        )

    return make


@pytest.fixture
def pg_url(pg_schema: str) -> Callable[..., str]:
    """The URL of this test's schema, with extra ``-c`` options if given."""

    def url(*options: str) -> str:
        return pg_url_for_schema(pg_schema, *options)

    return url
