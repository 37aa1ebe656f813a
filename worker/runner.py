"""The runner: one job from its raw JSON to its one terminal message, at most once.

    validate (pure) ─▶ open the job row and claim the call (committed) ─▶ send ─▶
    record the outcome and the terminal message in one transaction ─▶ publish once

A delivery that finds the job finished re-publishes the stored message; one that finds the
call claimed, answered, failed or unknown never sends: it replays, waits for the live
duplicate's lease, or escalates ``decision_interrupted``.

Sift, route and verified decide jobs go to ``worker.judgments`` (several calls a job), which
sends each call with ``send_call`` and waits out another delivery's claim with
``await_claim``, as the decide path does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from shared.errors import DecisionProviderError, FieldProblem, JobConflict, JobInvalid
from shared.jobs import AnyJob, DecideJob, job_deadline, job_fingerprint, job_kind, parse_job
from shared.judgments import JUDGMENT_KINDS, wants_verification
from shared.packs import pack_key
from shared.rejection import rejection_for
from shared.replies import Answer, EscalationMessage, EscalationReason, Receipt, ResultMessage
from shared.settings import Settings
from worker.faults import fault_point
from worker.ledger import CallOutcome, CallRow, ClaimLost, JobRow, Ledger, OutcomeStatus
from worker.observe import NullObserver, Observer
from worker.providers import DecisionRequest, ProviderRegistry, was_cancelled
from worker.providers.base import DecisionProvider, PreparedRequest
from worker.sinks import ReplySink
from worker.verdicts import escalation, failure_reason, ledger_status_for, verdict

if TYPE_CHECKING:
    from worker.judgments import JudgmentRunner
    from worker.menus import MenuRunner
    from worker.packs import PackRunner

__all__ = ["DECIDE_STEP", "Runner", "RunnerStats", "SentCall", "stored_answers"]

log = structlog.get_logger("decisions.runner")

DECIDE_STEP = "decide"
#: How often a delivery that found a live duplicate's claim looks again.
DUPLICATE_POLL_S = 1.0

T = TypeVar("T")
Message = ResultMessage | EscalationMessage


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RunnerStats:
    """What this process sent: calls handed to a provider, and their booked cost."""

    requests_sent: int = 0
    cost_usd: float = 0.0

    def add(self, receipt: Receipt) -> None:
        self.requests_sent += 1
        self.cost_usd += receipt.cost_usd or 0.0


@dataclass(frozen=True)
class SentCall:
    """What sending one claimed call came to: its ledger status, receipt and answers."""

    status: OutcomeStatus
    receipt: Receipt
    answers: dict[str, Answer] | None = None
    #: Why the job escalates when the call brought no answers.
    reason: EscalationReason = "provider_error"
    detail: str = ""
    error_code: str | None = None
    cancelled: bool = False

    def outcome(self) -> CallOutcome:
        answers_json = None if self.answers is None else answers_json_of(self.answers)
        return _outcome(self.status, self.receipt, answers_json, self.error_code)


def answers_json_of(answers: dict[str, Answer]) -> str:
    """Answers as a call's ``outcome_json`` stores them (``stored_answers`` reads them)."""
    return json.dumps({qid: a.model_dump(mode="json") for qid, a in answers.items()})


class Runner:
    def __init__(
        self,
        *,
        settings: Settings,
        ledger: Ledger,
        providers: ProviderRegistry,
        sink: ReplySink,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.providers = providers
        self.sink = sink
        self.stats = RunnerStats()
        self.observer: Observer = observer or NullObserver()
        #: Runs menu jobs (``worker.menus``); set by the worker context.
        self.menus: MenuRunner | None = None
        self._judgments: JudgmentRunner | None = None
        self._packs: PackRunner | None = None
        #: Blocking calls with an awaitable, batched stand-in (``worker.ledger.batch``: the
        #: hot-path ledger writes, grouped into one transaction); set by the worker context.
        self.batched: dict[Callable[..., Any], Callable[..., Any]] = {}

    @property
    def judgments(self) -> JudgmentRunner:
        """Runs sift, route and verified decide jobs with this runner's ledger and providers."""
        if self._judgments is None:
            # Imported here: worker.judgments builds on this module.
            from worker.judgments import JudgmentRunner

            self._judgments = JudgmentRunner(self)
        return self._judgments

    async def _db(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        # The ledger is synchronous SQLAlchemy; keep the loop free for requests in flight.
        batched = self.batched.get(fn)
        if batched is not None:
            return await batched(**kwargs)
        return await asyncio.to_thread(fn, **kwargs)

    @property
    def packs(self) -> PackRunner:
        """Runs a chunk's packable decide jobs (``worker.packs``) with this runner."""
        if self._packs is None:
            # Imported here: worker.packs builds on this module.
            from worker.packs import PackRunner

            self._packs = PackRunner(self)
        return self._packs

    async def run_chunk(self, raws: list[Any]) -> list[str]:
        """Run a chunk's jobs concurrently; each ends with its own terminal message.

        Decide jobs that asked to be packed (``shared.packs``) run together, by pack key."""
        groups, alone = self._pack_groups(raws)
        solo, packed = await asyncio.gather(
            asyncio.gather(*(self.run_one(raws[i]) for i in alone), return_exceptions=True),
            asyncio.gather(
                *(self.packs.run([(raws[i], job) for i, job in group]) for group in groups),
                return_exceptions=True,
            ),
        )
        results: dict[int, str | BaseException] = dict(zip(alone, solo, strict=True))
        for group, run in zip(groups, packed, strict=True):
            members = run if not isinstance(run, BaseException) else [run] * len(group)
            results.update(zip((i for i, _ in group), members, strict=True))
        # Every job runs to its end even if one fails (a ledger outage, say); then the first
        # failure is raised so the chunk is retried, and the finished jobs replay from the ledger.
        ordered = [results[i] for i in range(len(raws))]
        for result in ordered:
            if isinstance(result, BaseException):
                raise result
        return [r for r in ordered if isinstance(r, str)]

    def _pack_groups(self, raws: list[Any]) -> tuple[list[list[tuple[int, DecideJob]]], list[int]]:
        """The chunk's packable jobs by pack key (two or more a key), and the rest."""
        by_key: dict[str, list[tuple[int, DecideJob]]] = {}
        alone: list[int] = []
        for index, raw in enumerate(raws):
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
        """Run one job; returns the type of its terminal message."""
        if self.menus is not None and job_kind(raw) == "menu":
            return await self.menus.run_one(raw)
        if job_kind(raw) in JUDGMENT_KINDS or wants_verification(raw):
            return await self.judgments.run_one(raw)
        try:
            job = parse_job(raw)
            if not isinstance(job, DecideJob):
                raise JobInvalid([FieldProblem("kind", "this worker runs no menu jobs")], job.id)
            provider, prepared = self._prepare(job)
        except JobInvalid as exc:
            return await self._reject(raw, exc.problems)
        deadline = self._deadline(job)
        claim_args = {
            "step": DECIDE_STEP,
            "provider": provider.name,
            "model": prepared.model,
            "request_sha256": prepared.request_sha256,
            "lease_expires": deadline + timedelta(seconds=self.settings.lease_margin_s),
        }
        try:
            # A new job is opened and claimed in one write; a redelivery only reads its row.
            row, claim = await self._db(
                self.ledger.open_and_claim,
                job=self._open_args(job, deadline),
                claim=claim_args,
            )
        except JobConflict as exc:
            return await self._reject(raw, [FieldProblem("id", str(exc))])
        bound = log.bind(job_id=job.id, batch=job.batch, step=DECIDE_STEP, provider=provider.name)
        if claim is None:
            if row.terminal_message is not None:
                bound.info("job.replayed", outcome=row.terminal_type)
                return await self._publish(row, job.reply_to)
            if _now() >= row.deadline:
                # Late, but an earlier delivery may have sent the call: that one's fate decides.
                earlier = await self._db(self.ledger.get_call, job_id=job.id, step=DECIDE_STEP)
                if earlier is not None and earlier.status != "not_sent":
                    return await self._settle_existing(
                        job, earlier, _lost_cost(provider, prepared)
                    )
                late = escalation(
                    job, "deadline_exceeded", "dequeued after its deadline; nothing sent", []
                )
                return await self._finish(job, late, None)
            # The stored row's deadline counts, not the one this delivery computed.
            claim_args["lease_expires"] = row.deadline + timedelta(
                seconds=self.settings.lease_margin_s
            )
            claim = await self._db(self.ledger.claim, job_id=job.id, **claim_args)
        if not claim.fresh:
            return await self._settle_existing(job, claim.call, _lost_cost(provider, prepared))
        fault_point("after_claim", job.id)
        self.observer.call_started(provider.name)
        started = time.monotonic()
        message, outcome, cancelled = await self._send(job, provider, prepared, row.deadline)
        self.observer.call_finished(
            provider.name,
            outcome.status,
            time.monotonic() - started,
            outcome.cost_usd,
            outcome.cost_basis,
        )
        fault_point("after_response", job.id)
        bound.info("call.finished", outcome=outcome.status, reason=getattr(message, "reason", None))
        if cancelled:
            # Record what the cancel left behind before letting the cancel unwind the task.
            await asyncio.shield(self._finish(job, message, outcome))
            raise asyncio.CancelledError
        return await self._finish(job, message, outcome)

    # --- steps -----------------------------------------------------------------------
    def _prepare(self, job: DecideJob) -> tuple[DecisionProvider, PreparedRequest]:
        problems = self.providers.check(job.provider, job.model)
        if problems:
            raise JobInvalid(problems, job.id)
        provider = self.providers.get(job.provider or self.providers.default_name)
        request = DecisionRequest(
            state=job.state,
            questions={qid: q.wire() for qid, q in job.questions.items()},
            model=job.model,
            call_key=f"{job.id}/{DECIDE_STEP}",
        )
        try:
            return provider, provider.prepare(request, step=DECIDE_STEP)
        except DecisionProviderError as exc:
            if exc.code in ("invalid_request", "configuration"):
                raise JobInvalid(
                    [FieldProblem(exc.field or "questions", exc.detail)], job.id
                ) from None
            raise

    def _deadline(self, job: AnyJob) -> datetime:
        return job_deadline(
            job,
            default_s=self.settings.default_timeout_s,
            ceiling_s=self.settings.deadline_ceiling_s,
        )

    @staticmethod
    def _open_args(job: AnyJob, deadline: datetime) -> dict[str, Any]:
        return {
            "job_id": job.id,
            "kind": job.kind,
            "batch": job.batch,
            "reply_to": job.reply_to,
            "fingerprint": job_fingerprint(job),
            "deadline": deadline,
            "job_json": job.model_dump_json(),
        }

    async def _open(self, job: AnyJob) -> JobRow:
        return await self._db(self.ledger.open_job, **self._open_args(job, self._deadline(job)))

    async def _send(
        self,
        job: DecideJob,
        provider: DecisionProvider,
        prepared: PreparedRequest,
        deadline: datetime,
    ) -> tuple[Message, CallOutcome, bool]:
        """Send the claimed call; returns its message, its outcome, and whether it was cancelled."""
        sent = await self.send_call(provider, prepared, deadline, step=DECIDE_STEP, job_id=job.id)
        message: Message
        if sent.answers is not None:
            message = verdict(job, sent.answers, [sent.receipt])
        else:
            message = escalation(job, sent.reason, sent.detail, [sent.receipt])
        return message, sent.outcome(), sent.cancelled

    async def send_call(
        self,
        provider: DecisionProvider,
        prepared: PreparedRequest,
        deadline: datetime,
        *,
        step: str,
        job_id: str,
    ) -> SentCall:
        """Send one claimed call (the caller holds the claim) and say what it came to."""
        try:
            result = await provider.send(prepared, deadline, step=step)
        except DecisionProviderError as exc:
            receipt = (
                exc.receipt
                if isinstance(exc.receipt, Receipt)
                else _bare_receipt(provider, prepared, exc, step)
            )
            status = ledger_status_for(exc)
            receipt = receipt.model_copy(update={"status": status, "error_code": exc.code})
            if status != "not_sent":
                self.stats.add(receipt)
            return SentCall(
                status,  # type: ignore[arg-type]
                receipt,
                reason=failure_reason(exc),
                detail=str(exc),
                error_code=exc.code,
                cancelled=was_cancelled(exc),
            )
        except asyncio.CancelledError:
            # Cancelled with the request possibly in flight: its outcome is unknown, for good.
            receipt = _bare_receipt(provider, prepared, None, step).model_copy(
                update={"status": "unknown", "error_code": "aborted"}
            )
            return SentCall(
                "unknown",
                receipt,
                reason="decision_interrupted",
                detail="cancelled while in flight",
                error_code="aborted",
                cancelled=True,
            )
        except Exception as exc:
            # A bug after the claim: whether bytes left is unknown, so never send again.
            log.exception("call.crashed", job_id=job_id, step=step, error=type(exc).__name__)
            receipt = _bare_receipt(provider, prepared, None, step).model_copy(
                update={"status": "unknown", "error_code": "internal"}
            )
            return SentCall(
                "unknown",
                receipt,
                reason="decision_interrupted",
                detail=f"internal error: {type(exc).__name__}",
                error_code="internal",
            )
        self.stats.add(result.receipt)
        return SentCall("answered", result.receipt, answers=result.answers)

    async def await_claim(
        self,
        job_id: str,
        step: str,
        call: CallRow,
        lost_cost: tuple[float | None, str | None] = (None, None),
    ) -> CallRow | JobRow:
        """A call another delivery holds, once it is settled; or the job's row, if that
        delivery finished the job meanwhile (publish its message then).

        A live claim (its lease still runs) is waited for; one whose lease ran out belonged to
        a worker that died mid-call, and is booked ``unknown`` at ``lost_cost`` (the
        provider's list price as an estimate where it has one). Nothing is ever sent here.
        """
        while call.status == "claimed":
            now = _now()
            if call.lease_expires < now:
                usd, basis = lost_cost
                return await self._db(
                    self.ledger.expire_claim,
                    job_id=job_id,
                    step=step,
                    now=now,
                    cost_usd=usd,
                    cost_basis=basis,
                )
            await asyncio.sleep(min(DUPLICATE_POLL_S, (call.lease_expires - now).total_seconds()))
            row = await self._db(self.ledger.get_job, job_id=job_id)
            if row is not None and row.terminal_message is not None:
                return row
            latest = await self._db(self.ledger.get_call, job_id=job_id, step=step)
            assert latest is not None, "a claimed call never disappears"
            call = latest
        return call

    async def _settle_existing(
        self,
        job: DecideJob,
        call: CallRow,
        lost_cost: tuple[float | None, str | None] = (None, None),
    ) -> str:
        """Another delivery claimed this call: never send; replay, wait for it, or escalate."""
        settled = await self.await_claim(job.id, DECIDE_STEP, call, lost_cost)
        if isinstance(settled, JobRow):
            return await self._publish(settled, job.reply_to)
        call = settled
        receipt = _stored_receipt(call)
        message: Message
        answers = stored_answers(call)
        if answers is not None:
            message = verdict(job, answers, [receipt])
        elif call.status == "failed":
            message = escalation(
                job, "provider_error", f"the provider failed: {call.error_code}", [receipt]
            )
        else:
            message = escalation(
                job,
                "decision_interrupted",
                "a delivery was interrupted with the request possibly sent; it is never sent again",
                [receipt],
            )
        return await self._finish(job, message, None)

    async def _finish(self, job: DecideJob, message: Message, outcome: CallOutcome | None) -> str:
        try:
            row = await self._db(
                self.ledger.finish_job,
                job_id=job.id,
                message_type=message.type,
                reason=getattr(message, "reason", None),
                message_json=message.to_json(),
                outcome=outcome,
            )
            fault_point("after_record", job.id)
            self.observer.job_finished(
                job.kind,
                job.provider or self.providers.default_name,
                message.type,
                getattr(message, "reason", None),
            )
        except ClaimLost as lost:
            # Our lease ran out mid-call and another delivery booked the call unknown: its
            # verdict stands; settle from the stored row, never overwrite it.
            log.warning("call.claim_lost", job_id=job.id, stored=lost.call.status)
            return await self._settle_existing(job, lost.call)
        return await self._publish(row, job.reply_to)

    async def _publish(self, row: JobRow, stream: str) -> str:
        """Publish the stored terminal message (first written wins) to this delivery's stream."""
        assert row.terminal_message is not None and row.terminal_type is not None
        await self._db(
            self.sink.publish,
            stream=stream,
            job_id=row.job_id,
            message_type=row.terminal_type,
            message_json=row.terminal_message,
            escalation=row.terminal_type == "escalation",
        )
        if row.published_at is None:
            await self._db(self.ledger.mark_published, job_id=row.job_id)
        return row.terminal_type

    async def _reject(self, raw: Any, problems: list[FieldProblem]) -> str:
        rejection = rejection_for(raw, problems)
        log.info("job.rejected", job_id=rejection.job_id, fields=[p.field for p in problems])
        await self._db(
            self.sink.publish,
            stream=rejection.stream,
            job_id=rejection.job_id,
            message_type="rejected",
            message_json=rejection.message.to_json(),
            escalation=False,
            marker=rejection.marker,
        )
        kind = raw.get("kind") if isinstance(raw, dict) else None
        self.observer.job_finished(str(kind or "unknown"), "-", "rejected", None)
        return "rejected"


def _lost_cost(
    provider: DecisionProvider, prepared: PreparedRequest
) -> tuple[float | None, str | None]:
    """What a request lost with its worker is booked at: the provider's rule for an unknown
    outcome (Parallel: its list price as an estimate; OpenRouter: unknown)."""
    rule = getattr(provider, "unknown_cost", None)
    if rule is None:
        return None, None
    cost = rule(prepared)
    return cost.usd, cost.basis


def _outcome(
    status: str, receipt: Receipt, outcome_json: str | None, error_code: str | None
) -> CallOutcome:
    return CallOutcome(
        step=receipt.step,
        status=status,  # type: ignore[arg-type]
        receipt_json=receipt.model_dump_json(),
        outcome_json=outcome_json,
        cost_usd=receipt.cost_usd,
        cost_basis=receipt.cost_basis,
        error_code=error_code,
    )


def stored_answers(call: CallRow) -> dict[str, Answer] | None:
    """The decoded answers an ``answered`` call stored; None for any other call."""
    if call.status != "answered" or not call.outcome_json:
        return None
    return {qid: Answer.model_validate(a) for qid, a in json.loads(call.outcome_json).items()}


def _bare_receipt(
    provider: DecisionProvider,
    prepared: PreparedRequest,
    error: DecisionProviderError | None,
    step: str = DECIDE_STEP,
) -> Receipt:
    return Receipt(
        step=step,
        provider=provider.name,
        model=prepared.model,
        status="unknown",
        request_sha256=prepared.request_sha256,
        cost_usd=error.cost_usd if error else None,
        cost_basis=error.cost_basis if error else None,
        transport_attempts=error.attempts if error else 0,
        ref_id=error.ref_id if error else None,
    )


def _stored_receipt(call: CallRow) -> Receipt:
    if call.receipt_json:
        return Receipt.model_validate_json(call.receipt_json).model_copy(
            update={"replayed": True, "status": call.status}
        )
    return Receipt(
        step=call.step,
        provider=call.provider,
        model=call.model,
        status=call.status,
        request_sha256=call.request_sha256,
        cost_usd=call.cost_usd,
        cost_basis=call.cost_basis,
        error_code=call.error_code,
        replayed=True,
    )
