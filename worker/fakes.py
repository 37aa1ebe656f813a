"""The one door from production to the testing part: the fake provider and the recorder.

Nothing of ``worker.testing`` loads in a worker unless a setting asks for it here:
``DECISIONS_FAUX_IN_PROCESS`` (or the embedded ``decisions run``) for the in-process faux,
``DECISIONS_RECORD_DIR`` (``decisions record``) for the recorder, a dry run for the faux's
catalog prices. ``DECISIONS_FAUX_URL`` needs nothing from here: the faux is then another
process, reached over HTTP. ``tests/unit/test_layers.py`` keeps every other production
module from importing the testing part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from shared.settings import Settings

if TYPE_CHECKING:
    from worker.providers.observers import ResponseObserver

__all__ = ["faux_catalog_prices", "faux_transport", "recorder"]


def faux_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    """The in-process faux as an httpx transport (``settings.faux_in_process``)."""
    from worker.testing.faux import FauxBehaviour, FauxProvider

    return FauxProvider(FauxBehaviour(latency_ms=settings.faux_latency_ms)).transport()


def faux_catalog_prices() -> dict[str, float]:
    """The faux's price per million input tokens of each model, by id and by short name."""
    from worker.testing.faux.catalog import CATALOG

    per_model: dict[str, float] = {}
    for model in CATALOG:
        per_mtok = model.prompt_price_per_token_usd * 1_000_000
        per_model[model.id] = per_mtok
        per_model[model.short_name] = per_mtok
    return per_model


def recorder(settings: Settings) -> ResponseObserver:
    """The recorder for ``settings.record_dir`` (one per directory and secrets)."""
    from worker.testing.recording import recorder_for

    assert settings.record_dir is not None
    return recorder_for(
        str(settings.record_dir), tuple(settings.secret_headers), tuple(settings.secret_fields)
    )
