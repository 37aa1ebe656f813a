"""Durable streams: a worker refuses a streams Redis that would lose replies on a restart.

Replies and escalations are data the ledger has already marked published: a Redis without
persistence that restarts loses them for good (``decisions ledger republish`` can write them
again, but only someone who noticed runs it). So at start the worker asks the streams
Redis whether it persists, by ``CONFIG GET appendonly`` / ``save`` (AOF, or RDB snapshots),
or, where a managed Redis disables CONFIG, by ``INFO persistence`` (AOF on, or an RDB
snapshot taken). Without persistence it refuses to start with one line naming the server
and the fix, unless ``DECISIONS_ACCEPT_VOLATILE_STREAMS=1`` accepts the risk. With RDB
snapshots alone it starts, and says once (``streams.snapshots_only``) what a restore from a
snapshot loses: a reviewer's resolution lives in Redis alone until a reaper round stores it
in the ledger, so a Redis back from an older snapshot forgets it, and a republish puts its
escalation back for a second reviewer (found by an attack; README "Durable streams").

Accepted or not, the server is reached first (PING, after the SELECT of the URL's database):
a worker on a streams Redis it cannot use (no such database, nothing listening, the login
refused, a URL redis cannot read) took jobs, asked their providers, and failed every one
when it came to publish the reply. It refuses to start instead, naming DECISIONS_REDIS_URL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from shared.errors import ConfigurationError
from shared.redis_connect import redis_client
from shared.scrub import mask_url
from shared.settings import Settings

__all__ = [
    "Persistence",
    "check_streams_durable",
    "persistence_of",
    "reach",
    "refusal",
    "server_name",
    "short_reason",
    "streams_client",
]

log = structlog.get_logger("decisions.streams")

#: How long a worker start waits for the streams Redis to answer before refusing.
REACH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Persistence:
    """What a Redis server says of its persistence."""

    durable: bool
    #: How it was found and what it showed: ``appendonly no, save ''``.
    evidence: str
    #: An append-only file is on (False: snapshots alone, or nothing).
    aof: bool = False


def server_name(client: redis.Redis) -> str:
    """``host:port/db`` of a client's server: never its URL (which may hold a password)."""
    kwargs: dict[str, Any] = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}/{kwargs.get('db', 0)}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def persistence_of(client: redis.Redis) -> Persistence:
    """Whether the server persists, by CONFIG GET, or by INFO where CONFIG is refused."""
    try:
        config: Any = client.config_get("appendonly")
        config.update(client.config_get("save"))
    except redis.ResponseError:  # CONFIG renamed or disabled (managed Redis), or no ACL
        return _from_info(client.info("persistence"))
    aof = str(config.get("appendonly", "no")).lower() == "yes"
    save = str(config.get("save", "")).strip()
    evidence = f"appendonly {'yes' if aof else 'no'}, save {save!r}"
    return Persistence(aof or bool(save), evidence, aof)


def _from_info(info: dict[str, Any]) -> Persistence:
    """INFO says no save points: only what was done. A snapshot taken since the start
    (``rdb_saves``) or loaded at it (``rdb_last_load_keys_loaded``, Redis 7) shows RDB on; a
    snapshot-only server just restarted had neither of the first and was refused (an
    earlier note's item), so the load counts too. One that has done neither yet cannot be
    told from a server without persistence, and the refusal says so."""
    aof = int(info.get("aof_enabled", 0)) == 1
    saves = int(info.get("rdb_saves", 0) or 0)
    loaded = int(info.get("rdb_last_load_keys_loaded", 0) or 0)
    evidence = (
        f"CONFIG refused; INFO persistence: aof_enabled {int(aof)}, rdb_saves {saves}, "
        f"rdb_last_load_keys_loaded {loaded}"
    )
    if not (aof or saves or loaded):
        evidence += (
            " (a server with RDB snapshots on that has taken none since it started reads so "
            "too)"
        )
    return Persistence(aof or saves > 0 or loaded > 0, evidence, aof)


def check_streams_durable(settings: Settings, client: redis.Redis | None = None) -> str | None:
    """Why a worker must not start on these streams (None: it may). ``ConfigurationError``
    for a server it cannot use, whatever ``accept_volatile_streams`` says (``reach``); never
    raises for one that answers."""
    client = client or streams_client(settings)
    name = server_name(client)
    reach(client, name)
    if settings.accept_volatile_streams:
        return None
    try:
        found = persistence_of(client)
    except redis.ResponseError as exc:  # CONFIG and INFO both refused (an ACL)
        return (
            f"cannot tell whether the streams Redis at {name} (DECISIONS_REDIS_URL) "
            f"persists: CONFIG GET and INFO were refused ({exc}). Allow INFO for this "
            "user, or set DECISIONS_ACCEPT_VOLATILE_STREAMS=1 if it has AOF or RDB on"
        )
    except redis.ConnectionError as exc:  # it answered PING a moment ago
        raise ConfigurationError(
            f"the streams Redis at {name} (DECISIONS_REDIS_URL) stopped answering: {exc}"
        ) from None
    if found.durable:
        if not found.aof:
            log.warning(
                "streams.snapshots_only",
                server=name,
                evidence=found.evidence,
                risk="a restore from a snapshot loses the resolutions made since it that no "
                "reaper round has stored in the ledger yet, and a republish puts their "
                "escalations back: turn on appendonly yes (appendfsync everysec)",
            )
        return None
    return (
        f"the streams Redis at {name} (DECISIONS_REDIS_URL) does not persist ({found.evidence}):"
        " a restart of it loses every reply and escalation. Turn on AOF (appendonly yes) or RDB"
        " snapshots (save), or set DECISIONS_ACCEPT_VOLATILE_STREAMS=1 to accept the risk"
    )


def streams_client(settings: Settings) -> redis.Redis:
    """A client of DECISIONS_REDIS_URL; ``ConfigurationError`` for a URL redis cannot read."""
    try:
        return redis_client(settings.redis_url, socket_timeout=5)
    except ValueError as exc:  # a query option it cannot parse (?db=x), a scheme it lacks
        raise ConfigurationError(
            f"DECISIONS_REDIS_URL={mask_url(settings.redis_url)}: {exc} Fix the URL "
            "(redis://HOST:PORT/DB, options after ?)"
        ) from None


def reach(client: redis.Redis, name: str) -> None:
    """PING the server, after the SELECT of its database that each connection makes;
    ``ConfigurationError`` naming what is wrong when it refuses, or when it has not answered
    in REACH_TIMEOUT_S (it is retried until then: a Redis started beside the worker may take
    a few seconds)."""
    where = f"the streams Redis at {name} (DECISIONS_REDIS_URL)"
    until = time.monotonic() + REACH_TIMEOUT_S
    while True:
        try:
            client.ping()
            return
        except redis.AuthenticationError as exc:  # before ConnectionError: it is one
            raise ConfigurationError(
                f"{where} refused the credentials in DECISIONS_REDIS_URL ({exc}): put the "
                "right user and password in it (redis://USER:PASSWORD@HOST:PORT/DB)"
            ) from None
        except redis.ResponseError as exc:
            db = client.connection_pool.connection_kwargs.get("db", 0)
            raise ConfigurationError(refusal(where, db, exc)) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if time.monotonic() >= until:
                raise ConfigurationError(
                    f"{where} did not answer in {REACH_TIMEOUT_S:g} s ({short_reason(exc)}): start "
                    "it, or point DECISIONS_REDIS_URL at a running one"
                ) from None
            time.sleep(0.5)


def refusal(where: str, db: object, exc: Exception) -> str:
    """What a Redis (streams or broker) that answered with an error on connecting means."""
    if "DB index is out of range" in str(exc):
        return (
            f"{where} has no database {db} ({exc}): use one from 0 to 15 in the URL's path, "
            "unless the server's `databases` setting allows more"
        )
    return f"{where} refused PING: {exc}"


def short_reason(exc: Exception) -> str:
    # "Error 111 connecting to 127.0.0.1:6390. Connection refused." names the server twice.
    text = str(exc).rstrip(".")
    return text.rpartition(". ")[2] or text
