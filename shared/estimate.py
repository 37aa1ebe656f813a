"""What a batch will cost before it is sent: requests after packing, tokens, list prices.

Pure: nothing is sent and nothing is queued. Each job is planned as the worker plans it
(``shared.judgments``): a decide job is one request, plus one per verifying decision; a sift
job is as many requests as its items pack into (``shared.judgments.pack``, the worker's own
packing); a route job is one. Menu jobs talk to LLM runtimes whose turns depend on the
model's replies, so they are counted, not priced (``menu_jobs``).

Prices, per provider (``shared.prices.default_prices``; override or add with ``prices``):

- ``parallel``: its list price per request (``settings.parallel_list_price_usd``): exact, as
  it is what the worker books.
- ``typesafe`` ($0.042 per million input tokens), ``openai`` ($0.10), a System One host with a
  ``price_per_mtok_usd``, and the ``faux`` (its catalog's price, $0.10 for ``faux-1``):
  tokens estimated as the providers do, 4 bytes of canonical JSON a token, on the body in
  the System One shape. A host's own tokenizer counts differently: the stated accuracy is
  ``TOKEN_ESTIMATE_ACCURACY`` (the faux counts exactly this way, so its estimate is exact).
- ``openrouter`` and any host without a price: unknown (``None``, never 0), unless a price
  is configured.

Packed decide jobs (``shared.packs``) are planned as the client puts them in messages and
the worker splits each message into requests (``plan_pack``): each request is counted once,
its tokens are those of the packed body, and each job counts as one job.

The estimate is an upper bound on requests: a verified decision that escalates is not
verified, so it sends fewer.

Budgets: each request's worst case is what the worker reserves before sending it (a body's
bytes at the provider's maximum price per million tokens, ``settings.max_price_per_mtok_usd``,
else its own price; Parallel's list price), summed as ``worst_usd``; ``budget_fit`` says
whether the jobs' ``budget_usd`` holds the batch: ``fits`` (even at the worst case),
``tight`` (at the estimate, not at the worst case: requests in flight at once may be
refused), ``over`` (the estimate passes it: part of the batch will escalate
``budget_exhausted``) or ``no_maximum`` (a provider with no known maximum cannot run under a
budget; or menu jobs, whose model calls are known only as they run, each reserved then).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from shared.canonical import canonical_bytes
from shared.errors import FieldProblem, JobInvalid
from shared.jobs import AnyJob, DecideJob, MenuJob, RouteJob, SiftJob
from shared.judgments import (
    ROUTE_QUESTION_ID,
    item_id,
    pack,
    pack_limits_for,
    route_question,
    sift_question,
    sift_state,
)
from shared.message_size import MessageChunks, job_cost
from shared.packs import pack_key, pack_requests, packed_questions
from shared.prices import BUDGET_SLACK_USD, UNKNOWN_PRICE, Price, PriceBasis, price_table
from shared.settings import Settings
from shared.tokens import estimate_tokens

__all__ = [
    "ESTIMATE_TTL_S",
    "FAUX_DEFAULT_MODEL",
    "TOKEN_ESTIMATE_ACCURACY",
    "BudgetFit",
    "Estimate",
    "EstimateReport",
    "PlannedRequest",
    "ProviderEstimate",
    "estimate_jobs",
    "estimate_report",
    "plan_pack",
    "planned_requests",
    "unpacked_cost",
]

#: A token-priced estimate is within this fraction of the booked cost (a host's tokenizer
#: against 4 bytes a token; the faux's is exact).
TOKEN_ESTIMATE_ACCURACY: Final = 0.25
#: The model the faux answers when a job names none (``worker.providers.systemone``).
FAUX_DEFAULT_MODEL: Final = "faux-1"
#: How long a batch's stored estimate is kept in Redis.
ESTIMATE_TTL_S: Final = 30 * 24 * 3600

BudgetFit = Literal["fits", "tight", "over", "no_maximum"]


def _default_model(provider: str, settings: Settings) -> str | None:
    if provider in settings.systemone_hosts:
        return settings.systemone_hosts[provider].default_model
    return {
        "faux": FAUX_DEFAULT_MODEL,
        "typesafe": settings.typesafe_default_model,
        "openai": settings.openai_default_model,
        "openrouter": settings.openrouter_default_model,
        "parallel": "parallel-" + (settings.parallel_modes or ["fast"])[0],
    }.get(provider)


@dataclass(frozen=True)
class PlannedRequest:
    """One request a job will send: its step, where, and its estimated input tokens."""

    step: str
    provider: str
    model: str | None
    input_tokens: int
    #: The body's bytes (what the worst case is counted on).
    body_bytes: int = 0


def planned_requests(job: AnyJob, settings: Settings) -> list[PlannedRequest]:
    """The requests the worker will send for ``job`` (menus: none are planned).

    ``JobInvalid`` if a sift item fits in no request, as the worker would reject it.
    """
    if isinstance(job, MenuJob):
        return []
    provider = job.provider or settings.default_provider
    model = job.model or _default_model(provider, settings)

    if isinstance(job, RouteJob):
        question = route_question(job.routes, job.instructions).wire()
        return [_request("route", provider, model, job.state, {ROUTE_QUESTION_ID: question})]
    if isinstance(job, SiftJob):
        state = sift_state(job.state)
        questions = [
            (item_id(i), sift_question(job.question, item)) for i, item in enumerate(job.items)
        ]
        groups = pack(state, questions, pack_limits_for(provider), field="items")
        return [
            _request(f"sift.{k}", provider, model, state, dict(questions[i] for i in group))
            for k, group in enumerate(groups)
        ]
    assert isinstance(job, DecideJob)
    questions_wire = {qid: q.wire() for qid, q in job.questions.items()}
    planned = [_request("decide", provider, model, job.state, questions_wire)]
    if job.verify is not None:
        checker = job.verify.provider or provider
        checker_model = job.verify.model or _default_model(checker, settings)
        planned += [
            _request(f"verify.{k}", checker, checker_model, job.state, questions_wire)
            for k in range(job.verify.verifications)
        ]
    return planned


def plan_pack(
    jobs: Sequence[DecideJob], settings: Settings
) -> list[tuple[list[int], PlannedRequest]]:
    """The requests the worker sends for one message of packed jobs (one ``pack_key``):
    the indexes of each request's jobs, and the request. A request of one job is that
    job's own request, as the worker sends it alone."""
    first = jobs[0]
    provider = first.provider or settings.default_provider
    model = first.model or _default_model(provider, settings)
    members = [{qid: q.wire() for qid, q in job.questions.items()} for job in jobs]
    planned = []
    for group in pack_requests(first.state, members, pack_limits_for(provider)):
        if len(group) == 1:
            planned.append((group, planned_requests(jobs[group[0]], settings)[0]))
            continue
        questions = packed_questions([members[i] for i in group])
        planned.append((group, _request("decide", provider, model, first.state, questions)))
    return planned


def unpacked_cost(job: DecideJob, settings: Settings, prices: Mapping[str, Price]) -> float | None:
    """What ``job``'s decision alone would cost at list price (None where unknown)."""
    alone = planned_requests(job.model_copy(update={"verify": None}), settings)[0]
    return prices.get(alone.provider, UNKNOWN_PRICE).cost(alone.model, alone.input_tokens)


def _request(
    step: str, provider: str, model: str | None, state: Any, questions: dict[str, Any]
) -> PlannedRequest:
    # The System One body, as the worker's System One providers send it (and the faux reads).
    body: dict[str, Any] = {"questions": questions, "state": state}
    if model is not None:
        body["model"] = model
    size = len(canonical_bytes(body))
    return PlannedRequest(step, provider, model, estimate_tokens(size), size)


@dataclass
class ProviderEstimate:
    provider: str
    basis: PriceBasis
    requests: int = 0
    input_tokens: int = 0
    #: Summed estimate; ``None`` when any request's price is unknown (never 0 for unknown).
    cost_usd: float | None = 0.0
    #: The booked cost is within this fraction of ``cost_usd``.
    accuracy: float = 0.0


@dataclass
class Estimate:
    """What a set of jobs will send and cost, by provider."""

    batch: str | None = None
    jobs: int = 0
    menu_jobs: int = 0
    requests: int = 0
    by_provider: dict[str, ProviderEstimate] = field(default_factory=dict)
    #: The requests' worst cases summed (what budgets reserve); None: one has no maximum.
    worst_usd: float | None = 0.0
    #: The jobs' ``budget_usd`` (the first one given: it creates the batch's budget).
    budget_usd: float | None = None

    @property
    def budget_fit(self) -> BudgetFit | None:
        """Whether ``budget_usd`` holds these jobs (None: no budget); see the module doc."""
        if self.budget_usd is None:
            return None
        if self.worst_usd is None:
            return "no_maximum"
        # As the ledger's reservation judges it (``BUDGET_SLACK_USD``).
        if self.worst_usd <= self.budget_usd + BUDGET_SLACK_USD:
            return "fits"
        if not self.cost_unknown and self.cost_known_usd <= self.budget_usd + BUDGET_SLACK_USD:
            return "tight"
        return "over"

    @property
    def cost_known_usd(self) -> float:
        """The estimated cost of the providers with a price (unknown ones left out)."""
        return sum(p.cost_usd for p in self.by_provider.values() if p.cost_usd is not None)

    @property
    def cost_unknown(self) -> bool:
        """Some requests go to a provider with no price: the total is a lower bound."""
        return any(p.cost_usd is None for p in self.by_provider.values())

    @property
    def accuracy(self) -> float:
        return max((p.accuracy for p in self.by_provider.values()), default=0.0)

    def add(self, job: AnyJob, requests: list[PlannedRequest], prices: Mapping[str, Price]) -> None:
        self.add_jobs([job], requests, prices)

    def add_jobs(
        self, jobs: Sequence[AnyJob], requests: list[PlannedRequest], prices: Mapping[str, Price]
    ) -> None:
        """Count ``jobs`` and the ``requests`` they send together (packed: once for all)."""
        for job in jobs:
            self.jobs += 1
            if isinstance(job, MenuJob):
                self.menu_jobs += 1
                self.worst_usd = None  # its model calls are known only as it runs
            if self.budget_usd is None:
                self.budget_usd = job.budget_usd
        for planned in requests:
            price = prices.get(planned.provider, UNKNOWN_PRICE)
            entry = self.by_provider.get(planned.provider)
            if entry is None:
                accuracy = TOKEN_ESTIMATE_ACCURACY if price.basis == "tokens" else 0.0
                entry = ProviderEstimate(planned.provider, price.basis, accuracy=accuracy)
                self.by_provider[planned.provider] = entry
            entry.requests += 1
            entry.input_tokens += planned.input_tokens
            cost = price.cost(planned.model, planned.input_tokens)
            entry.cost_usd = None if cost is None or entry.cost_usd is None else (
                round(entry.cost_usd + cost, 12)
            )
            worst = price.worst(planned.body_bytes)
            self.worst_usd = None if worst is None or self.worst_usd is None else (
                round(self.worst_usd + worst, 12)
            )
            self.requests += 1

    def to_json(self) -> str:
        body = asdict(self)
        body.update(
            cost_known_usd=self.cost_known_usd,
            cost_unknown=self.cost_unknown,
            accuracy=self.accuracy,
            budget_fit=self.budget_fit,
        )
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Estimate:
        body = json.loads(raw)
        providers = {
            name: ProviderEstimate(**entry) for name, entry in body["by_provider"].items()
        }
        return cls(
            batch=body["batch"],
            jobs=body["jobs"],
            menu_jobs=body["menu_jobs"],
            requests=body["requests"],
            by_provider=providers,
            # Stored before budgets: no worst case, no budget.
            worst_usd=body.get("worst_usd"),
            budget_usd=body.get("budget_usd"),
        )


def estimate_jobs(
    jobs: Iterable[AnyJob],
    settings: Settings,
    *,
    prices: Mapping[str, Price] | None = None,
    batch: str | None = None,
) -> Estimate:
    """The estimate of valid jobs (``JobInvalid`` from a sift that cannot be packed)."""
    table = price_table(settings, prices)
    result = Estimate(batch=batch)
    for job in jobs:
        result.add(job, planned_requests(job, settings), table)
    return result


@dataclass
class EstimateReport:
    """A dry run: the estimate of the valid jobs, per batch too, and the rejected ones."""

    total: Estimate = field(default_factory=Estimate)
    batches: dict[str, Estimate] = field(default_factory=dict)
    #: Rejected jobs by their id.
    rejected: dict[str, list[FieldProblem]] = field(default_factory=dict)
    #: Rejected lines with no readable id, by their 0-based position: apart from the ids, as
    #: ``SubmitReport`` keeps them (a made-up ``line-N`` key let a job whose id was
    #: ``line-1`` hide a rejection; found by an attack).
    rejected_lines: dict[int, list[FieldProblem]] = field(default_factory=dict)
    #: Every job rejected, a repeated id each time (``rejected`` keeps one entry an id).
    rejections: int = 0

    @property
    def rejected_count(self) -> int:
        return max(self.rejections, len(self.rejected) + len(self.rejected_lines))

    def add(self, job: AnyJob, requests: list[PlannedRequest], prices: Mapping[str, Price]) -> None:
        self.add_jobs([job], requests, prices)

    def add_jobs(
        self, jobs: Sequence[AnyJob], requests: list[PlannedRequest], prices: Mapping[str, Price]
    ) -> None:
        """Jobs of one batch and the requests they send together (``Estimate.add_jobs``)."""
        self.total.add_jobs(jobs, requests, prices)
        batch_name = jobs[0].batch if jobs else None
        if batch_name is not None:
            batch = self.batches.setdefault(batch_name, Estimate(batch=batch_name))
            batch.add_jobs(jobs, requests, prices)


def _wire_text(raw: Any, job: AnyJob) -> str:
    """The job's JSON as the client sends it (``shared.job_wire.wire_text``, which this pure
    module may not import: it reaches kombu): the line's own dict when it is plain JSON."""
    if isinstance(raw, dict):
        try:
            return json.dumps(raw, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            pass
    return job.model_dump_json(exclude_none=True)


def estimate_report(
    lines: Iterable[Any],
    validate: Callable[[Any], AnyJob],
    settings: Settings,
    *,
    prices: Mapping[str, Price] | None = None,
) -> EstimateReport:
    """The estimate of raw job lines, each validated by ``validate`` (a line it rejects is in
    ``rejected``, or ``rejected_lines`` without an id), decide jobs packed as
    ``Client.submit_batch`` packs them."""
    table = price_table(settings, prices)
    report = EstimateReport()
    # As the client's messages: by pack key, count and size (``shared.message_size``).
    packs: MessageChunks[DecideJob] = MessageChunks(
        settings.pack_chunk_size, settings.max_message_bytes
    )

    def add_pack(message: list[DecideJob]) -> None:
        for group, planned in plan_pack(message, settings):
            report.add_jobs([message[i] for i in group], [planned], table)

    for line, raw in enumerate(lines):
        job_id: str | None = None
        try:
            job = validate(raw)
            job_id = job.id
            key = pack_key(job, settings.default_provider)
            if key is not None and isinstance(job, DecideJob):
                for full in packs.add(key, job, job_cost(_wire_text(raw, job))):
                    add_pack(full)
                continue
            requests = planned_requests(job, settings)
        except JobInvalid as exc:
            named = exc.job_id or job_id
            if named:
                report.rejected[named] = exc.problems
            else:
                report.rejected_lines[line] = exc.problems
            report.rejections += 1
            continue
        report.add(job, requests, table)
    for message in packs.drain():
        add_pack(message)
    return report
