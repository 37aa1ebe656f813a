"""Testing an integration of decision-worker: the pytest plugin and what its fixtures give.

The plugin (``worker.testing.plugin``) is registered through the ``pytest11`` entry point,
so installing decision-worker is enough for a project's tests to use ``faux_server``,
``faux_counts``, ``faux_behaviour``, ``decisions_worker``, ``reply_stream`` and the
``decisions_live`` / ``decisions_replay`` markers. The classes below are what they return,
for type hints and for use without pytest. Importing this package loads no Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.testing.handles import (
        FauxBehaviourControl,
        FauxCounts,
        FauxHandle,
        LiveCounts,
        RequestCounts,
    )
    from worker.testing.harness import DecisionsWorker
    from worker.testing.streams import ReplyStream

__all__ = [
    "DecisionsWorker",
    "FauxBehaviourControl",
    "FauxCounts",
    "FauxHandle",
    "LiveCounts",
    "ReplyStream",
    "RequestCounts",
]

_HOMES = {
    "DecisionsWorker": "worker.testing.harness",
    "FauxBehaviourControl": "worker.testing.handles",
    "FauxCounts": "worker.testing.handles",
    "FauxHandle": "worker.testing.handles",
    "LiveCounts": "worker.testing.handles",
    "RequestCounts": "worker.testing.handles",
    "ReplyStream": "worker.testing.streams",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that pytest loading the plugin (worker.testing.plugin) stays cheap.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
