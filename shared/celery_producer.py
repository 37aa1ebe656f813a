"""The producer's Celery app: JSON messages to the broker the workers read (the worker's own
app is ``worker.app``)."""

from __future__ import annotations

from celery import Celery

from shared.settings import Settings

__all__ = ["producer_app"]


def producer_app(settings: Settings) -> Celery:
    """A Celery app that only sends: JSON, the broker's visibility timeout as the worker's."""
    app = Celery("decisions-producer", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        broker_connection_retry_on_startup=True,
    )
    return app
