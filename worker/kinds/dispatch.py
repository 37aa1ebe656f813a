"""Dispatch: a chunk of raw jobs, each to its kind, each to its one terminal message.

    task (``worker.tasks``) ─▶ ``Runner.run_chunk`` ─▶ by kind: decide (``worker.kinds.decide``),
    packed decide (``worker.kinds.packs``), sift/route/verify (``worker.kinds.judgments``), menu
    (``worker.kinds.menus``) ─▶ the delivery protocol (``worker.delivery``): ledger and provider
    ─▶ outbox ─▶ reply stream

Every kind runs on the one ``Delivery`` this runner holds; none writes the ledger or a stream
any other way. A job id that comes twice in one chunk is one job: its first copy runs, and
the others run after it, replaying its stored outcome (or rejected, if their content differs).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from shared.errors import JobInvalid
from shared.job_parsing import job_kind, parse_job
from shared.jobs import DecideJob
from shared.judgments import JUDGMENT_KINDS, wants_verification
from shared.packs import pack_key
from shared.settings import Settings
from shared.streams import ReplyPublisher
from worker.delivery import Delivery, DeliveryStats
from worker.delivery.reply_batch import GroupPublish
from worker.kinds.decide import DecideKind
from worker.ledger import Ledger
from worker.ledger.batch import GroupCommit
from worker.observability.observer import Observer
from worker.process.inflight import JobGate
from worker.providers import ProviderRegistry

if TYPE_CHECKING:
    from worker.kinds.judgments import JudgmentRunner
    from worker.kinds.menus import MenuRunner
    from worker.kinds.packs import PackRunner

__all__ = ["Runner", "RunnerStats"]

log = structlog.get_logger("decisions.runner")

#: What this process sent (the embedded run's summary reads it).
RunnerStats = DeliveryStats


class Runner:
    def __init__(
        self,
        *,
        settings: Settings,
        ledger: Ledger,
        providers: ProviderRegistry,
        sink: ReplyPublisher,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.providers = providers
        self.sink = sink
        self.delivery = Delivery(
            settings=settings, ledger=ledger, providers=providers, sink=sink, observer=observer
        )
        self.stats = self.delivery.stats
        self.observer = self.delivery.observer
        self.decide = DecideKind(self.delivery)
        #: Runs menu jobs (``worker.kinds.menus``); set by the worker context.
        self.menus: MenuRunner | None = None
        self._judgments: JudgmentRunner | None = None
        self._packs: PackRunner | None = None
        #: Jobs running at once per provider (``worker.process.inflight``); None: no bound (a chunk
        #: runs all its jobs at once, the Celery pool bounding the chunks).
        self.gate: JobGate | None = None

    def use_group_commit(self, group: GroupCommit) -> None:
        self.delivery.use_group_commit(group)

    def use_group_publish(self, group: GroupPublish) -> None:
        self.delivery.use_group_publish(group)

    def flush_published(self) -> None:
        """Blocking: write the published marks the group commit holds (a warm shutdown's
        last step, ``GroupCommit.mark_published_later``)."""
        group = self.delivery.ledger.group
        if group is None:
            return
        group.flush_published()
        publish = self.delivery.outbox.group
        # Transactions and Redis round trips of the hot path, for ``make bench`` to read.
        log.info(
            "runner.batched",
            ledger_transactions=group.batches,
            ledger_writes=group.writes,
            publish_round_trips=publish.batches if publish is not None else None,
            publishes=publish.writes if publish is not None else None,
        )

    @property
    def judgments(self) -> JudgmentRunner:
        """Runs sift, route and verified decide jobs on this runner's delivery."""
        if self._judgments is None:
            # Imported here: worker.kinds.judgments builds on the decide kind.
            from worker.kinds.judgments import JudgmentRunner

            self._judgments = JudgmentRunner(self.delivery)
        return self._judgments

    @property
    def packs(self) -> PackRunner:
        """Runs a chunk's packable decide jobs (``worker.kinds.packs``) on this runner's
        delivery."""
        if self._packs is None:
            from worker.kinds.packs import PackRunner

            self._packs = PackRunner(self.delivery, self.decide)
        return self._packs

    async def run_chunk(self, raws: list[Any]) -> list[str]:
        """Run a chunk's jobs concurrently; each ends with its own terminal message.

        Decide jobs that asked to be packed (``shared.packs``) run together, by pack key. A
        job id seen earlier in the chunk runs after the first pass (it replays)."""
        first, repeats = _first_copies(raws)
        groups, alone = self._pack_groups(raws, first)
        solo, packed = await asyncio.gather(
            asyncio.gather(*(self._admitted(raws[i]) for i in alone), return_exceptions=True),
            asyncio.gather(*(self._pack_admitted(raws, group) for group in groups),
                           return_exceptions=True),
        )
        results: dict[int, str | BaseException] = dict(zip(alone, solo, strict=True))
        for group, run in zip(groups, packed, strict=True):
            members = run if not isinstance(run, BaseException) else [run] * len(group)
            results.update(zip((i for i, _ in group), members, strict=True))
        for index in repeats:
            try:
                results[index] = await self._admitted(raws[index])
            except Exception as error:
                results[index] = error
        # Every job runs to its end even if one fails (a ledger outage, say); then the first
        # failure is raised so the chunk is retried, and the finished jobs replay from the ledger.
        ordered = [results[i] for i in range(len(raws))]
        for result in ordered:
            if isinstance(result, BaseException):
                raise result
        return [r for r in ordered if isinstance(r, str)]

    async def _admitted(self, raw: Any) -> str:
        """``run_one`` once the gate admits the job (``NotAdmitted`` if it never does)."""
        if self.gate is None:
            return await self.run_one(raw)
        async with self.gate.slot(raw):
            return await self.run_one(raw)

    async def _pack_admitted(
        self, raws: list[Any], group: list[tuple[int, DecideJob]]
    ) -> list[str | BaseException]:
        """A pack is one request: it takes one slot of the gate."""
        members = [(raws[i], job) for i, job in group]
        if self.gate is None:
            return await self.packs.run(members)
        async with self.gate.slot(raws[group[0][0]]):
            return await self.packs.run(members)

    def _pack_groups(
        self, raws: list[Any], indexes: list[int]
    ) -> tuple[list[list[tuple[int, DecideJob]]], list[int]]:
        """The chunk's packable jobs by pack key (two or more a key), and the rest."""
        by_key: dict[str, list[tuple[int, DecideJob]]] = {}
        alone: list[int] = []
        for index in indexes:
            raw = raws[index]
            key = None
            if isinstance(raw, dict) and raw.get("pack") is True:
                try:
                    job = parse_job(raw)
                except JobInvalid:
                    job = None  # rejected on the decide path, naming its fields
                if isinstance(job, DecideJob):
                    key = pack_key(job, self.providers.default_name)
            if key is None:
                alone.append(index)
                continue
            assert isinstance(job, DecideJob)
            by_key.setdefault(key, []).append((index, job))
        groups = []
        for group in by_key.values():
            if len(group) == 1:
                alone.append(group[0][0])
            else:
                groups.append(group)
        return groups, alone

    async def run_one(self, raw: Any) -> str:
        """Run one job by its kind; returns the type of its terminal message."""
        kind = job_kind(raw)
        if self.menus is not None and kind == "menu":
            return await self.menus.run_one(raw)
        if kind in JUDGMENT_KINDS or wants_verification(raw):
            return await self.judgments.run_one(raw)
        return await self.decide.run(raw)


def _first_copies(raws: list[Any]) -> tuple[list[int], list[int]]:
    """Indexes of each job id's first copy in the chunk (and of jobs without a readable id),
    and of the later copies."""
    seen: set[str] = set()
    first: list[int] = []
    repeats: list[int] = []
    for index, raw in enumerate(raws):
        job_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(job_id, str) and job_id in seen:
            repeats.append(index)
            continue
        if isinstance(job_id, str):
            seen.add(job_id)
        first.append(index)
    return first, repeats
