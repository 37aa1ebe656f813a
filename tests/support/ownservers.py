"""Private servers for tests that stop, restart or break them: never the shared ones.

``own_redis`` runs a ``redis-server`` on a free port, persisting with an append-only file
fsynced on every write, so a ``kill -9`` loses nothing it acknowledged (the Celery queue
and the unacked messages survive a restart). ``own_postgres`` runs a throwaway PostgreSQL
cluster (``initdb`` + ``pg_ctl``) on a free port with trust auth. Both are stopped and
their files removed at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import sqlalchemy as sa

from tests.support.services import free_port, unavailable

__all__ = ["OwnPostgres", "OwnRedis", "own_postgres", "own_redis"]

_PG_BIN_DIRS = ("/usr/local/bin", *sorted(map(str, Path("/usr/lib/postgresql").glob("*/bin"))))


def _wait(what: str, ready: Callable[[], bool], timeout_s: float = 30) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if ready():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready after {timeout_s} s")


class OwnRedis:
    """A redis-server of the test's own; ``kill``/``start`` keep its data (AOF), unless it
    was made with ``persist=False`` (then a restart empties it, as a cache-like Redis does).
    ``extra`` arguments go to redis-server as they are."""

    def __init__(self, workdir: Path, *, persist: bool = True, extra: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.persist = persist
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server")
        log = (self.workdir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.workdir),
                "--appendonly", "yes" if self.persist else "no",
                "--appendfsync", "always",
                "--save", "",
                "--maxmemory-policy", "noeviction",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        _wait(f"redis-server on {self.port}", self._pings)

    def _pings(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """``kill -9``: acknowledged writes are on disk already (appendfsync always)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def own_redis(*, persist: bool = True, extra: tuple[str, ...] = ()) -> Iterator[OwnRedis]:
    workdir = Path(tempfile.mkdtemp(prefix="decisions-redis-"))
    server = OwnRedis(workdir, persist=persist, extra=extra)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _pg_binary(name: str) -> str:
    for folder in _PG_BIN_DIRS:
        candidate = Path(folder) / name
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        unavailable(f"PostgreSQL's {name}")
    return str(found)


class OwnPostgres:
    """A PostgreSQL cluster of the test's own; ``stop``/``start`` keep its data."""

    def __init__(self, datadir: Path) -> None:
        self.datadir = datadir
        self.port = free_port()
        # initdb and postgres refuse to run as root: run them as the postgres user then.
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        subprocess.run(
            argv, check=True, user=self._user, capture_output=True, timeout=120
        )

    def init(self) -> None:
        if self._user is not None:
            shutil.chown(self.datadir, self._user, self._user)
        self._run(
            _pg_binary("initdb"), "-D", str(self.datadir / "data"),
            "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8",
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            _pg_binary("pg_ctl"), "-D", str(self.datadir / "data"), "-o", options,
            "-l", str(self.datadir / "postgres.log"), "-w", "-t", "60", "start",
        )
        _wait(f"PostgreSQL on {self.port}", self._connects)

    def _connects(self) -> bool:
        engine = sa.create_engine(self.url, connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return True
        except sa.exc.OperationalError:
            return False
        finally:
            engine.dispose()

    def alter_system(self, *settings: str) -> None:
        """``ALTER SYSTEM SET`` each of ``settings`` ("name = value"), then reload: a reloaded
        setting reaches every session, pooled ones too (``max_connections`` waits for a
        restart)."""
        admin = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for setting in settings:
                    conn.exec_driver_sql(f"ALTER SYSTEM SET {setting}")
                conn.exec_driver_sql("SELECT pg_reload_conf()")
        finally:
            admin.dispose()

    def stop(self, mode: str = "fast") -> None:
        """``fast`` closes every session (as a restart does); ``immediate`` is a crash."""
        self._run(
            _pg_binary("pg_ctl"), "-D", str(self.datadir / "data"), "-m", mode, "-w", "stop"
        )

    def running(self) -> bool:
        done = subprocess.run(
            [_pg_binary("pg_ctl"), "-D", str(self.datadir / "data"), "status"],
            user=self._user,
            capture_output=True,
        )
        return done.returncode == 0


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    # Not under pytest's tmp_path: its parents are private to root, and postgres runs as
    # its own user.
    datadir = Path(tempfile.mkdtemp(prefix="decisions-pg-"))
    server = OwnPostgres(datadir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if server.running():
            server.stop("immediate")
        shutil.rmtree(datadir, ignore_errors=True)
