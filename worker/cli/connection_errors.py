"""Explanations of the errors of the servers ``decisions`` talks to: the ledger's database
(SQLAlchemy), Redis, and the Celery broker (kombu).

Connection errors rarely say which setting they come from, so the server a message names
(``HOST:PORT``) is matched against the URLs the settings hold. Every URL is shown with its
password masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import kombu.exceptions
import redis.exceptions
from sqlalchemy import exc as sa_exc

from worker.cli.explanation import RUNTIME, Explanation, masked, raw_setting, setting_url
from worker.cli.ledger_file import file_problem
from worker.ledger.engine import PG_MAX_OVERFLOW, PG_POOL_SIZE
from worker.ledger.errors import LedgerConflict, LedgerUnavailable

__all__ = ["CONNECTION_HANDLERS", "URL_SETTINGS"]

#: The settings that hold a server's URL, by variable.
URL_SETTINGS = {
    "DECISIONS_REDIS_URL": "redis_url",
    "DECISIONS_BROKER_URL": "broker_url",
    "DECISIONS_LEDGER_URL": "ledger_url",
}
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
LEDGER_EXAMPLE = "postgresql+psycopg://USER@HOST:5432/DATABASE or sqlite:///./decisions.db"

# --- the ledger (SQLAlchemy) -------------------------------------------------------------


def _ledger_unavailable(exc: LedgerUnavailable) -> Explanation:
    return _ledger_failure(str(exc).partition(": ")[2] or str(exc))


def _ledger_conflict(exc: LedgerConflict) -> Explanation:
    # The server is up: "cannot be reached ... start the database" sent the operator to the
    # wrong place. Already run again a few times (worker.ledger.conflicts). Said for a worker
    # (its task retries later) and a command alike (which nothing runs again: a `budget
    # resume` aborted so had withdrawn its escalations and reopened nothing, found by an
    # attack; run again, it completes).
    where = f"the ledger at DECISIONS_LEDGER_URL={setting_url('ledger_url')}"
    detail = masked(" ".join((str(exc).partition(": ")[2] or str(exc)).split()))
    return Explanation(
        f"{where} aborted a transaction for a conflict with another: {detail}",
        "PostgreSQL rolled it back, so none of it was written: a worker tries it again by "
        "itself; a command, run it again. If it goes on, report it with this line",
        RUNTIME,
    )


def _ledger_operational(exc: sa_exc.OperationalError) -> Explanation:
    return _ledger_failure(str(exc.orig or exc).splitlines()[0])


def _ledger_programming(exc: sa_exc.ProgrammingError) -> Explanation | None:
    # libpq refuses a connection option of the URL before it connects (psycopg raises it as
    # a ProgrammingError): a URL to mend, not a bug. Any other ProgrammingError is one.
    detail = " ".join(str(exc.orig or exc).split())
    return _option_problem(detail)


def _option_problem(detail: str) -> Explanation | None:
    """A libpq connection option of the ledger URL that libpq refused, or None (found by an
    attack: ``?sslmode=bogus`` read "cannot be reached ... start the database", and
    ``?connect_timeout=abc`` or an unknown option "a bug in decisions")."""
    if not _OPTION_REFUSED.search(detail):
        return None
    where = f"the ledger at DECISIONS_LEDGER_URL={setting_url('ledger_url')}"
    return Explanation(
        f"{where}: {masked(detail)}",
        "mend or remove that option in DECISIONS_LEDGER_URL's query (?name=value: libpq's "
        "connection options)",
    )


#: How libpq words a connection option it refuses (name or value).
_OPTION_REFUSED: Final = re.compile(
    r"invalid connection option|invalid \w+ value|bad value for|invalid value for parameter"
)


def _ledger_failure(detail: str) -> Explanation:
    where = f"the ledger at DECISIONS_LEDGER_URL={setting_url('ledger_url')}"
    detail = masked(" ".join(detail.split()))
    in_file = file_problem(detail)  # a SQLite file it cannot write: which, and why
    if in_file is not None:
        return in_file
    option = _option_problem(detail)
    if option is not None:
        return option
    missing = re.search(r'database "([^"]+)" does not exist', detail)
    if missing:
        return Explanation(
            f"{where}: PostgreSQL has no database {missing.group(1)!r}",
            f"create it (`createdb {missing.group(1)}`) or point DECISIONS_LEDGER_URL at one "
            "that exists; then run `decisions migrate`",
        )
    if "password authentication failed" in detail or "no password supplied" in detail:
        return Explanation(
            f"{where}: {detail}", "put the right user and password in DECISIONS_LEDGER_URL"
        )
    server_said = _server_refusal(where, detail)
    if server_said is not None:
        return server_said
    if "unable to open database file" in detail:
        return Explanation(
            f"{where}: SQLite cannot open that file",
            "create its directory, or point DECISIONS_LEDGER_URL at a writable path",
        )
    return Explanation(
        f"{where} cannot be reached: {detail}",
        "start the database, or point DECISIONS_LEDGER_URL at one that answers",
        RUNTIME,
    )


def _server_refusal(where: str, detail: str) -> Explanation | None:
    """A PostgreSQL that runs and answers, but refuses: "start the database" is the wrong fix.
    Kept short: ``decisions status`` shows 300 characters of the problem and the fix."""
    if "too many clients already" in detail or "remaining connection slots are reserved" in detail:
        return Explanation(
            f"{where}: PostgreSQL has no connection slot left (max_connections)",
            "raise the server's max_connections, or run fewer workers or a lower "
            "DECISIONS_WORKER_CONCURRENCY: a worker process keeps up to "
            f"{PG_POOL_SIZE + PG_MAX_OVERFLOW} ledger connections",
            RUNTIME,
        )
    if "read-only transaction" in detail:
        return Explanation(
            f"{where}: PostgreSQL takes no writes (a standby, or default_transaction_read_only "
            "is on)",
            "point DECISIONS_LEDGER_URL at the primary, or turn default_transaction_read_only "
            "off once the failover or full disk that set it is over",
            RUNTIME,
        )
    return None


def _no_dialect(exc: sa_exc.NoSuchModuleError) -> Explanation:
    match = re.search(r"sqlalchemy\.dialects:(\S+)", str(exc))
    dialect = match.group(1) if match else "?"
    fix = f"write {LEDGER_EXAMPLE}"
    if dialect.split(".")[0] == "postgres":
        fix = "write postgresql+psycopg://... (SQLAlchemy has no `postgres://`)"
    return Explanation(
        f"DECISIONS_LEDGER_URL={setting_url('ledger_url')}: SQLAlchemy knows no database "
        f"{dialect!r}",
        fix,
    )


def _no_driver(exc: ModuleNotFoundError) -> Explanation | None:
    # SQLAlchemy knows the dialect (mysql://, oracle://) but imports its driver only when
    # the engine is made: a missing one is the ledger URL's problem, not a bug.
    tb = exc.__traceback__
    while tb is not None and "sqlalchemy" not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    if tb is None:
        return None
    return Explanation(
        f"DECISIONS_LEDGER_URL={setting_url('ledger_url')}: its database driver "
        f"{exc.name!r} is not installed",
        f"install that driver, or write {LEDGER_EXAMPLE}",
    )


def _ledger_url_invalid(exc: sa_exc.ArgumentError) -> Explanation:
    return Explanation(
        f"DECISIONS_LEDGER_URL={setting_url('ledger_url')} is not a database URL ({exc})",
        f"write {LEDGER_EXAMPLE}",
    )


# --- Redis and the broker ----------------------------------------------------------------


def _redis_auth(exc: redis.exceptions.AuthenticationError) -> Explanation:
    variables = _variables_for(str(exc)) or _redis_variables()
    return Explanation(
        f"Redis refused the login given by {' and '.join(variables)}: {exc}",
        "put the right user and password in the URL (redis://USER:PASSWORD@HOST:PORT/DB)",
    )


def _redis_unreachable(exc: redis.exceptions.ConnectionError) -> Explanation:
    variables = _variables_for(str(exc)) or _redis_variables()
    reason = str(exc).rstrip(".")
    reason = re.sub(r"^Error -?\d+ connecting to \S+:\d+\.\s*", "", reason) or reason
    urls = ", ".join(f"{v}={setting_url(URL_SETTINGS[v])}" for v in variables)
    kind = "timed out" if isinstance(exc, redis.exceptions.TimeoutError) else "failed"
    return Explanation(
        f"connecting to Redis {kind} ({reason}): {urls}",
        _unverified_fix(reason, variables)
        or f"start Redis there, or point {' and '.join(variables)} at a running one",
        RUNTIME,
    )


def _unverified_fix(reason: str, variables: list[str]) -> str | None:
    """The fix for a TLS server whose certificate no authority this process trusts vouches
    for (the broker is verified too: ``shared.celery_producer``), or for a ``rediss://`` URL
    whose server timed out (``_handshake_fix``), else None."""
    if "CERTIFICATE_VERIFY_FAILED" not in reason:
        return _handshake_fix(reason, variables)
    return (
        f"add ?ssl_ca_certs=/path/to/ca.pem (the authority that signed the server's "
        f"certificate) to {' and '.join(variables)}, or ?ssl_cert_reqs=none to skip the check"
    )


def _handshake_fix(reason: str, variables: list[str]) -> str | None:
    # A server that speaks plain Redis takes the connection and never answers the TLS
    # hello: the connect times out (shared.redis_connect), and "start Redis there" sent the
    # operator to a server that runs. Found by an attack (before, a submit hung for good).
    tls = [v for v in variables if _raw_of(v).startswith("rediss://")]
    if not tls or "timeout" not in reason.lower().replace(" ", ""):
        return None
    named = " and ".join(tls)
    return (
        f"{named} asks for TLS (rediss://): if the server has none, write redis:// there; "
        "else check that it answers at that address"
    )


def _redis_answered(exc: redis.exceptions.ResponseError) -> Explanation:
    text = str(exc)
    if "DB index is out of range" in text:
        numbered = [v for v in _redis_variables() if _redis_db(URL_SETTINGS[v]) > 15]
        return _no_such_database(numbered or _redis_variables())
    if "NOAUTH" in text or "WRONGPASS" in text:
        return Explanation(
            f"Redis refused the command: {text}",
            "put the password in the URL: redis://:PASSWORD@HOST:PORT/DB",
        )
    return Explanation(f"Redis answered an error: {masked(text)}", None, RUNTIME)


def _no_such_database(variables: list[str]) -> Explanation:
    urls = ", ".join(f"{v}={setting_url(URL_SETTINGS[v])}" for v in variables)
    return Explanation(
        f"Redis has no such database: {urls}",
        "use a database from 0 to 15 (redis://HOST:PORT/0), unless the server's "
        "`databases` setting allows more",
    )


def _broker_unreachable(exc: kombu.exceptions.OperationalError) -> Explanation:
    url = setting_url("broker_url")
    if not _has_host(raw_setting("broker_url")):
        return _url_without_host("DECISIONS_BROKER_URL", "redis://HOST:PORT/DB")
    if "DB index is out of range" in str(exc):
        # The broker is there: "start the broker there" was the wrong fix.
        return _no_such_database(["DECISIONS_BROKER_URL"])
    return Explanation(
        f"cannot reach the broker at DECISIONS_BROKER_URL={url} ({masked(str(exc))})",
        _unverified_fix(str(exc), ["DECISIONS_BROKER_URL"])
        or "start the broker there, or point DECISIONS_BROKER_URL at a running one",
        RUNTIME,
    )


def _no_transport(exc: KeyError) -> Explanation | None:
    text = str(exc.args[0]) if exc.args else ""
    if not text.startswith("No such transport"):
        return None
    scheme = text.rpartition(":")[2].strip()
    return Explanation(
        f"DECISIONS_BROKER_URL={setting_url('broker_url')}: Celery has no broker of kind "
        f"{scheme!r}",
        "use redis://HOST:PORT/DB or amqp://USER:PASSWORD@HOST:5672/VHOST",
    )


def _not_a_redis_url(exc: ValueError) -> Explanation | None:
    option = re.match(r"Invalid value for '([^']+)' in connection URL", str(exc))
    if option is not None:
        return _redis_option_invalid(option.group(1), str(exc))
    if "Redis URL must specify" not in str(exc):
        return None
    variables = [
        v for v in _redis_variables() if not raw_setting(URL_SETTINGS[v]).startswith(REDIS_SCHEMES)
    ] or ["DECISIONS_REDIS_URL"]
    urls = ", ".join(f"{v}={setting_url(URL_SETTINGS[v])}" for v in variables)
    return Explanation(
        f"not a Redis URL: {urls}", "write redis://HOST:PORT/DB (or rediss://, unix://PATH)"
    )


def _redis_option_invalid(name: str, text: str) -> Explanation:
    # redis-py names the query option it could not read (?db=x), not the URL it was in.
    variables = [
        v for v in _redis_variables() if name in parse_qs(urlsplit(_raw_of(v)).query)
    ] or _redis_variables()
    urls = ", ".join(f"{v}={setting_url(URL_SETTINGS[v])}" for v in variables)
    where = " (the database is the URL's path: redis://HOST:PORT/DB)" if name == "db" else ""
    return Explanation(f"{urls}: {text}", f"fix or remove ?{name}=...{where}")


def _url_without_host(variable: str, example: str) -> Explanation:
    url = setting_url(URL_SETTINGS[variable])
    return Explanation(f"{variable}={url} names no host", f"write {example}")


# --- helpers ---------------------------------------------------------------------------------


def _raw_of(variable: str) -> str:
    return raw_setting(URL_SETTINGS[variable])


def _has_host(url: str) -> bool:
    return "://" in url and bool(urlsplit(url).hostname)


def _redis_variables() -> list[str]:
    return [
        v for v, field in URL_SETTINGS.items() if raw_setting(field).startswith(("redis", "unix"))
    ] or ["DECISIONS_REDIS_URL"]


def _redis_db(field: str) -> int:
    path = urlsplit(raw_setting(field)).path.strip("/")
    return int(path) if path.isdigit() else 0


def _variables_for(message: str) -> list[str]:
    """The URL settings whose host and port are the ``HOST:PORT`` named in ``message``."""
    match = re.search(r"connecting to ([^\s:]+):(\d+)", message)
    if not match:
        return []
    host, port = match.group(1), int(match.group(2))
    found = []
    for variable, field in URL_SETTINGS.items():
        parts = urlsplit(raw_setting(field))
        try:
            url_port = parts.port or 6379
        except ValueError:
            continue
        if parts.hostname == host and url_port == port:
            found.append(variable)
    return found


CONNECTION_HANDLERS: list[tuple[Any, Callable[[Any], Explanation | None]]] = [
    (LedgerConflict, _ledger_conflict),  # before its base class
    (LedgerUnavailable, _ledger_unavailable),
    (sa_exc.NoSuchModuleError, _no_dialect),
    (ModuleNotFoundError, _no_driver),
    (sa_exc.ArgumentError, _ledger_url_invalid),
    (sa_exc.OperationalError, _ledger_operational),
    (sa_exc.ProgrammingError, _ledger_programming),
    (redis.exceptions.AuthenticationError, _redis_auth),
    (redis.exceptions.ConnectionError, _redis_unreachable),
    (redis.exceptions.TimeoutError, _redis_unreachable),
    (redis.exceptions.ResponseError, _redis_answered),
    (kombu.exceptions.OperationalError, _broker_unreachable),
    (KeyError, _no_transport),
    (ValueError, _not_a_redis_url),
]
