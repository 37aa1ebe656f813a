"""``Delivery``: the one object every job kind runs its steps on.

It holds what a delivery needs (settings, the ledger's calls, the providers, the outbox, the
observer and the process's counters) and offers the job lifecycle (``JobLifecycle``:
validate, open, replay, finish, publish) and the call cycle (``CallProtocol``: claim,
await, send, record). A kind plans its steps and builds its messages; it never writes the
ledger or a stream any other way.
"""

from __future__ import annotations

from shared.jobs import AnyJob
from shared.settings import Settings
from shared.streams import ReplyPublisher
from worker.calibration.thresholds import ThresholdBook
from worker.delivery.budgets import budget_ask
from worker.delivery.calls import CallProtocol
from worker.delivery.ledger_io import LedgerIO
from worker.delivery.lifecycle import JobLifecycle
from worker.delivery.outbox import Outbox
from worker.delivery.reply_batch import GroupPublish
from worker.delivery.stats import DeliveryStats
from worker.ledger import BudgetAsk, Ledger
from worker.ledger.batch import GroupCommit
from worker.observability.observer import NullObserver, Observer
from worker.providers import ProviderRegistry
from worker.providers.base import DecisionProvider, PreparedRequest

__all__ = ["Delivery"]


class Delivery(CallProtocol, JobLifecycle):
    def __init__(
        self,
        *,
        settings: Settings,
        ledger: Ledger,
        providers: ProviderRegistry,
        sink: ReplyPublisher,
        observer: Observer | None = None,
        stats: DeliveryStats | None = None,
    ) -> None:
        self.settings = settings
        self.providers = providers
        self.observer = observer or NullObserver()
        self.stats = stats or DeliveryStats()
        self.ledger = LedgerIO(ledger)
        self.outbox = Outbox(sink, self.ledger, self.observer, None)
        #: Calibrated ``escalate_below`` thresholds, read from the labels (cached).
        self.thresholds = ThresholdBook(
            ledger,
            ttl_s=settings.calibration_ttl_s,
            min_labels=settings.calibration_min_labels,
        )

    def use_group_commit(self, group: GroupCommit) -> None:
        """Send the hot-path ledger writes through ``group`` (one transaction for many)."""
        self.ledger.group = group

    def use_group_publish(self, group: GroupPublish) -> None:
        """Send publishes through ``group`` (one Redis round trip for many)."""
        self.outbox.group = group

    def provider_name(self, name: str | None) -> str:
        """A job's provider, or the default one, as metrics and logs name it."""
        return name or self.providers.default_name

    def budget(
        self, job: AnyJob, provider: DecisionProvider, prepared: PreparedRequest
    ) -> BudgetAsk | None:
        """What the claim of ``job``'s request ``prepared`` reserves against its budgets."""
        return budget_ask(
            self.settings, job, provider.name, self.providers.worst_cost(provider, prepared)
        )
