"""The real services the integration tests use, each test on its own Redis database, stream
names and PostgreSQL schema. Unreachable: a skip locally, a failure under CI=true."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
import sqlalchemy as sa

REDIS_HOST = os.environ.get("TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TEST_REDIS_PORT", "6379"))
PG_BASE_URL = os.environ.get("TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def unavailable(what: str) -> None:
    """Fail under CI (the service must be there), skip on a laptop without it."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is not reachable, and CI=true requires it")
    pytest.skip(f"{what} is not reachable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_url(db: int) -> str:
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


@contextmanager
def redis_database(db: int) -> Iterator[redis.Redis]:
    """A Redis database of the test's own, emptied before and after."""
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)
    try:
        client.ping()
    except redis.ConnectionError:
        unavailable(f"Redis at {REDIS_HOST}:{REDIS_PORT}")
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@contextmanager
def postgres_schema(prefix: str = "t") -> Iterator[str]:
    """A fresh PostgreSQL schema; yields a URL whose search_path is that schema."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(PG_BASE_URL)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    except sa.exc.OperationalError:
        engine.dispose()
        unavailable(f"PostgreSQL at {PG_BASE_URL}")
    try:
        yield f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()
