"""The producer's Celery app: JSON messages to the broker the workers read (the worker's own
app is ``worker.app``), and the broker's TLS options both apps use.

kombu connects to a ``rediss://`` broker without checking its certificate unless the URL
carries an ``ssl_*`` option (it logs "defaulting to insecure SSL behaviour" and uses
``CERT_NONE``): anyone on the path could stand in for the broker and read every job. redis-py,
which the reply streams and the intake records use on the same URLs, verifies by default. So
the broker does too (``broker_ssl``): the system's certificate authorities, or the URL's
``ssl_ca_certs=/path/ca.pem``; ``ssl_cert_reqs=none`` in the URL is the explicit way back.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import parse_qs, urlsplit

from celery import Celery

from shared.redis_connect import broker_timeouts
from shared.settings import Settings

__all__ = ["broker_ssl", "producer_app"]


def broker_ssl(broker_url: str) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for this broker URL: certificates verified for a
    ``rediss://`` URL that sets no ``ssl_*`` option of its own; None (the URL's own options,
    or no TLS) otherwise."""
    parts = urlsplit(broker_url)
    if parts.scheme != "rediss":
        return None
    if any(name.startswith("ssl_") for name in parse_qs(parts.query, keep_blank_values=True)):
        return None  # kombu reads them from the URL, as redis-py does
    return {"ssl_cert_reqs": ssl.CERT_REQUIRED}


def producer_app(settings: Settings) -> Celery:
    """A Celery app that only sends: JSON, the broker's visibility timeout as the worker's."""
    app = Celery("decisions-producer", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        broker_use_ssl=broker_ssl(settings.broker_url),
        task_serializer="json",
        accept_content=["json"],
        # Bounded connect and TLS handshake (shared.redis_connect): a rediss:// URL on a
        # plain Redis left a submit in the handshake for good.
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            **broker_timeouts(),
        },
        broker_connection_retry_on_startup=True,
    )
    return app
