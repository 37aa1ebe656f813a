"""A ``Runner`` on a test's ledger against an in-process faux provider, with its sink.

The same five lines were written out in several tests (the reaper's rounds, a bug in
planning, a claim after a finish); they call this instead.
"""

from __future__ import annotations

from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

__all__ = ["faux_runner"]


def faux_runner(
    settings: Settings, ledger: Ledger, faux: FauxProvider | None = None
) -> tuple[Runner, FauxProvider, MemorySink]:
    """The runner, the faux it sends to (``faux``, or a new one) and the sink it publishes to."""
    faux = faux if faux is not None else FauxProvider()
    sink = MemorySink()
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(settings, faux_transport=faux.transport()),
        sink=sink,
    )
    return runner, faux, sink
