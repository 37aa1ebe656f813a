"""Durable streams: a worker refuses a streams Redis that would lose replies on a restart.

Replies and escalations are data the ledger has already marked published: a Redis without
persistence that restarts loses them for good (``decisions ledger republish`` can write them
again, but only someone who noticed runs it). So at start the worker asks the streams
Redis whether it persists, by ``CONFIG GET appendonly`` / ``save`` (AOF, or RDB snapshots),
or, where a managed Redis disables CONFIG, by ``INFO persistence`` (AOF on, or an RDB
snapshot taken). Without persistence it refuses to start with one line naming the server
and the fix, unless ``DECISIONS_ACCEPT_VOLATILE_STREAMS=1`` accepts the risk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from shared.errors import ConfigurationError
from shared.settings import Settings

__all__ = ["Persistence", "check_streams_durable", "persistence_of", "server_name"]

#: How long a worker start waits for the streams Redis to answer before refusing.
REACH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Persistence:
    """What a Redis server says of its persistence."""

    durable: bool
    #: How it was found and what it showed: ``appendonly no, save ''``.
    evidence: str


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
    return Persistence(aof or bool(save), evidence)


def _from_info(info: dict[str, Any]) -> Persistence:
    aof = int(info.get("aof_enabled", 0)) == 1
    saves = int(info.get("rdb_saves", 0) or 0)
    evidence = f"CONFIG refused; INFO persistence: aof_enabled {int(aof)}, rdb_saves {saves}"
    return Persistence(aof or saves > 0, evidence)


def check_streams_durable(settings: Settings, client: redis.Redis | None = None) -> str | None:
    """Why a worker must not start on these streams (None: it may). Never raises for a
    server that answers; ``ConfigurationError`` if it does not answer in REACH_TIMEOUT_S."""
    if settings.accept_volatile_streams:
        return None
    client = client or redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    name = server_name(client)
    until = time.monotonic() + REACH_TIMEOUT_S
    while True:
        try:
            found = persistence_of(client)
            break
        except redis.AuthenticationError:
            raise ConfigurationError(
                f"the streams Redis at {name} refused the credentials in DECISIONS_REDIS_URL"
            ) from None
        except redis.ResponseError as exc:  # CONFIG and INFO both refused (an ACL)
            return (
                f"cannot tell whether the streams Redis at {name} (DECISIONS_REDIS_URL) "
                f"persists: CONFIG GET and INFO were refused ({exc}). Allow INFO for this "
                "user, or set DECISIONS_ACCEPT_VOLATILE_STREAMS=1 if it has AOF or RDB on"
            )
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() >= until:
                raise ConfigurationError(
                    f"the streams Redis at {name} (DECISIONS_REDIS_URL) did not answer in "
                    f"{REACH_TIMEOUT_S:g} s, so whether it persists replies is unknown: "
                    "start it first"
                ) from None
            time.sleep(0.5)
    if found.durable:
        return None
    return (
        f"the streams Redis at {name} (DECISIONS_REDIS_URL) does not persist ({found.evidence}):"
        " a restart of it loses every reply and escalation. Turn on AOF (appendonly yes) or RDB"
        " snapshots (save), or set DECISIONS_ACCEPT_VOLATILE_STREAMS=1 to accept the risk"
    )
