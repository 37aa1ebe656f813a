"""A worker refuses to start on a broker it cannot reach, as it does on such a streams Redis.

Celery retries a broker it cannot connect to, at start as after a loss
(``broker_connection_retry_on_startup``), up to 100 times with a growing wait: a worker
whose DECISIONS_BROKER_URL named the wrong port (or PostgreSQL's) ran for over an hour
printing "consumer: Cannot connect to redis://:***@..." (the ``:***@`` a password the URL
did not have), and no line named the setting. At start, before Celery's consumer connects,
the worker now connects once the way that consumer will (the app's own kombu connection:
its transport, TLS and transport options; for ``amqp://`` the TCP connection and AMQP's
handshake, for Redis a PING after the SELECT of the URL's database), retried for
``REACH_TIMEOUT_S`` as the streams Redis is (a broker started beside the worker may take a
few seconds), and refuses with one line naming DECISIONS_BROKER_URL and the fix.

Only at start: a broker that goes away later is retried by Celery as before (a fleet rides
out a broker restart; tests/faults).
"""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from shared.errors import ConfigurationError
from worker.process.durability import REACH_TIMEOUT_S, refusal, short_reason

__all__ = ["check_broker_reachable"]

#: Bound on one attempt's reads: a ``rediss://`` broker whose server speaks no TLS never
#: answers the handshake, and without it the start waited for ever.
ATTEMPT_TIMEOUT_S = 5.0


class _Answered(Exception):
    """The server answered with an error: waiting longer will not change it."""


def check_broker_reachable(celery: Celery) -> None:
    """``ConfigurationError`` naming DECISIONS_BROKER_URL when the broker of ``celery``
    does not take a connection within ``REACH_TIMEOUT_S``, or refuses it."""
    options = {"socket_timeout": ATTEMPT_TIMEOUT_S}  # Redis's; other transports ignore it
    connection = celery.connection_for_read(transport_options=options)
    # Host, port and database (vhost) only: never the credentials, not even masked.
    where = (
        f"the broker at {connection.transport_cls}://{connection.host}/"
        f"{connection.virtual_host} (DECISIONS_BROKER_URL)"
    )

    def stop_on_an_answer(exc: Exception, _interval: float) -> None:
        # kombu retries Redis's error replies too (no such database, a login refused).
        if isinstance(exc, redis.ResponseError | redis.AuthenticationError):
            raise _Answered(exc)

    try:
        connection.ensure_connection(
            errback=stop_on_an_answer,
            max_retries=None,
            interval_start=0.5,
            interval_step=0,
            interval_max=0.5,
            timeout=REACH_TIMEOUT_S,
        )
    except _Answered as answered:
        raise ConfigurationError(_answer(where, connection, answered.args[0])) from None
    except OperationalError as exc:  # what kombu makes of the transport's connection errors
        raise ConfigurationError(
            f"{where} did not answer in {REACH_TIMEOUT_S:g} s ({short_reason(exc)}): start "
            "it, or point DECISIONS_BROKER_URL at a running one"
        ) from None
    finally:
        connection.release()


def _answer(where: str, connection: Any, exc: Exception) -> str:
    if isinstance(exc, redis.AuthenticationError):
        return (
            f"{where} refused the credentials in DECISIONS_BROKER_URL ({exc}): put the right "
            "user and password in it (redis://USER:PASSWORD@HOST:PORT/DB)"
        )
    return refusal(where, connection.virtual_host, exc)
