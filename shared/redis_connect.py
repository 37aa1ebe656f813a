"""How every process connects to Redis and to a Redis broker: with a bound on the connect and
the TLS handshake.

Found by an attack: ``rediss://`` against a server that speaks plain Redis (or anything
that accepts the connection and never answers the TLS hello) left ``decisions submit`` in
the handshake for good, with no output: redis-py and kombu wait without limit unless given
a ``socket_connect_timeout``, which redis-py applies to the handshake too. Only the connect
is bounded here, not reads: a reply reader's blocking XREAD waits as long as it asks. A URL's
own ``?socket_connect_timeout=`` wins (redis-py reads the URL's options after these).
"""

from __future__ import annotations

from typing import Any, Final

import redis

__all__ = ["CONNECT_TIMEOUT_S", "broker_timeouts", "redis_client"]

#: The longest wait for a Redis server to accept a connection and finish the TLS handshake.
CONNECT_TIMEOUT_S: Final = 10.0


def redis_client(url: str, **options: Any) -> redis.Redis:
    """A client of the Redis at ``url`` whose connect and handshake time out (``options``
    are redis-py's, e.g. a ``socket_timeout``)."""
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT_S)
    return redis.Redis.from_url(url, **options)


def broker_timeouts() -> dict[str, Any]:
    """The Redis broker's ``broker_transport_options`` that bound its connect and handshake
    (kombu hands them to redis-py; other transports ignore them)."""
    return {"socket_connect_timeout": CONNECT_TIMEOUT_S}
