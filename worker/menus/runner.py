"""The menu runner: a menu job from its JSON to its one terminal message, every call at most once.

    validate ─▶ resolve handlers/runtime (rejected if not) ─▶ open the job row ─▶
    for each step of the session (pick.0, turn.N, tool.N, pick.1, ..., handler):
        claim (committed) ─▶ call the model / run the tool or handler ─▶ record the outcome
    ─▶ the terminal message, stored with the last outcome ─▶ publish once

``DecisionSession`` (``shared.menus``) decides what each step is; this module makes each one a
ledger call keyed ``(job id, step)``. A redelivered job walks the same steps: a step whose
outcome is stored is replayed (a model reply is fed to the session again, never re-asked; a
tool's result is given back; a finished handler's value is the result, never re-run); a step
claimed and never recorded is never done again: once its lease is over it is booked
``unknown`` and the job escalates, ``decision_interrupted`` for a model call,
``handler_interrupted`` for a tool or handler (which may have had its effect). A live
duplicate's claim (its lease still runs) is waited for, as in the decide path.

Escalations: retries spent (``DecisionError``) → ``menu_unparseable`` with the menu and the
last reply; a tool or handler raising → ``handler_failed`` with the error (the model is not
asked again); a runtime failure → as the decide path names it (``provider_error``,
``decision_interrupted``, ``deadline_exceeded``). A step due after the deadline is not done:
``deadline_exceeded``, unless an earlier delivery left its outcome, which is replayed.

Handlers and tools run in a thread (``asyncio.to_thread``), so the loop keeps serving the
chunk's other jobs. A handler parameter typed ``Runtime`` gets a runtime whose model calls
are ledger calls too (``handler.call.0``, ``tool.2.call.0``, ...).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from shared.canonical import digest_of
from shared.errors import (
    DecisionError,
    DecisionProviderError,
    FieldProblem,
    JobConflict,
    JobInvalid,
)
from shared.jobs import MenuJob, parse_job
from shared.menus import (
    Decided,
    DecisionSession,
    FunctionOption,
    Message,
    ModelReply,
    ModelStep,
    Pick,
    ToolSpec,
    ToolStep,
)
from shared.menus.session import SessionAction
from shared.replies import EscalationMessage, EscalationReason, Receipt, ResultMessage
from worker.faults import fault_point
from worker.ledger import CallOutcome, CallRow, ClaimLost, JobRow
from worker.menus.messages import menu_context, menu_escalation, menu_result
from worker.menus.plan import MenuPlan, prepare_menu
from worker.menus.stored import (
    error_text,
    head_of,
    jsonable,
    read_outcome,
    reply_from_outcome,
    reply_outcome,
    tool_content,
)
from worker.providers import was_cancelled
from worker.runner import Runner, _outcome, _stored_receipt
from worker.runtimes import BlockingRuntime, RuntimeRegistry
from worker.runtimes.chat import PreparedChat
from worker.verdicts import failure_reason, ledger_status_for

__all__ = ["HANDLER_PROVIDER", "HANDLER_STEP", "Boundary", "MenuRunner"]

log = structlog.get_logger("decisions.menus")

#: The ledger's ``provider`` of a tool or handler execution (its ``model`` is the handler).
HANDLER_PROVIDER = "handler"
HANDLER_STEP = "handler"
#: How often a delivery that found a live duplicate's claim looks again.
CLAIM_POLL_S = 1.0

#: ``(point, job_id, step)``: called at each step boundary (after_claim, after_response,
#: after_record); the fault points of ``worker.faults`` are called there too.
Boundary = Callable[[str, str, str], None]
Message_ = ResultMessage | EscalationMessage


def _now() -> datetime:
    return datetime.now(UTC)


class _Unbound:
    """Stands for the runtime handlers get, while a job is checked (never called)."""

    def exec(self, messages: list[Message], *, tools: list[ToolSpec] | None = None) -> ModelReply:
        raise RuntimeError("no runtime is bound while a menu job is being checked")


@dataclass(frozen=True)
class _End:
    """How a run ends: a message to store with the last call's outcome, or a stored row."""

    message: Message_ | None = None
    outcome: CallOutcome | None = None
    row: JobRow | None = None
    cancelled: bool = False
    #: The step ``outcome`` closes (for a claim lost at the very end).
    step: str | None = None


class MenuRunner:
    """Runs menu jobs for a ``Runner`` (whose ledger, sink, stats and helpers it shares)."""

    def __init__(
        self,
        runner: Runner,
        *,
        handlers: Mapping[str, Callable[..., Any]],
        runtimes: RuntimeRegistry,
        on_boundary: Boundary | None = None,
    ) -> None:
        self.runner = runner
        self.handlers = handlers
        self.runtimes = runtimes
        self.on_boundary = on_boundary

    def prepare(self, job: MenuJob) -> MenuPlan:
        """The job resolved against this worker; ``JobInvalid`` naming each field otherwise."""
        return prepare_menu(job, self.handlers, self.runtimes, injection_runtime=_Unbound())

    async def run_one(self, raw: Any) -> str:
        """Run one menu job; returns the type of its terminal message."""
        runner = self.runner
        try:
            job = parse_job(raw)
            if not isinstance(job, MenuJob):
                raise JobInvalid([FieldProblem("kind", "not a menu job")], job.id)
            plan = self.prepare(job)
        except JobInvalid as exc:
            return await runner._reject(raw, exc.problems)
        try:
            row = await runner._open(job)
        except JobConflict as exc:
            return await runner._reject(raw, [FieldProblem("id", str(exc))])
        if row.terminal_message is not None:
            log.info("job.replayed", job_id=job.id, outcome=row.terminal_type)
            return await runner._publish(row, job.reply_to)
        run = _MenuRun(self, plan, row.deadline)
        end = await run.run()
        if end.cancelled:
            # Record what the cancel left behind before letting the cancel unwind the task.
            await asyncio.shield(run.finish(end))
            raise asyncio.CancelledError
        return await run.finish(end)

    def boundary(self, point: str, job_id: str, step: str) -> None:
        fault_point(point, job_id)
        if self.on_boundary is not None:
            self.on_boundary(point, job_id, step)


class _MenuRun:
    """One delivery of one menu job."""

    def __init__(self, owner: MenuRunner, plan: MenuPlan, deadline: datetime) -> None:
        self.owner = owner
        self.runner = owner.runner
        self.ledger = owner.runner.ledger
        self.plan = plan
        self.job = plan.job
        self.deadline = deadline
        self.lease = deadline + timedelta(seconds=owner.runner.settings.lease_margin_s)
        self.receipts: list[Receipt] = []
        self.session: DecisionSession | None = None
        self.turn = "pick.0"
        self.nested: dict[str, int] = {}
        self.log = log.bind(job_id=self.job.id, batch=self.job.batch, runtime=plan.runtime.name)

    async def db(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        return await self.runner._db(fn, **kwargs)

    # --- the session -----------------------------------------------------------------------

    async def run(self) -> _End:
        session = self.plan.session(self.runtime_for(HANDLER_STEP))
        self.session = session
        action: SessionAction = session.start()
        while True:
            if isinstance(action, ModelStep):
                step = self.turn = action.step
                reply = await self.model_call(action)
                if isinstance(reply, _End):
                    return reply
                try:
                    action = session.on_reply(reply)
                except DecisionError as error:
                    detail = (
                        f"no valid pick after {error.attempts} attempt(s): "
                        f"{error.kind}: {error.message}"
                    )
                    return _End(self.escalate("menu_unparseable", detail, step=step))
            elif isinstance(action, ToolStep):
                content = await self.tool_call(action)
                if isinstance(content, _End):
                    return content
                action = session.on_tool_result(content)
            elif isinstance(action, Decided):
                return await self.resolve(action.pick)
            else:  # Finished: a turn without a menu, which a menu job never is
                return _End(menu_result(self.job, action.text, list(self.receipts)))

    def escalate(
        self, reason: EscalationReason, detail: str, *, step: str | None = None
    ) -> EscalationMessage:
        context = menu_context(
            self.job,
            self.plan.menu,
            runtime=self.plan.runtime.name,
            model=self.plan.model,
            session=self.session,
            step=step,
        )
        return menu_escalation(self.job, reason, detail, list(self.receipts), context)

    # --- model calls -------------------------------------------------------------------------

    def prepare_call(
        self, step: str, messages: list[Message], tools: list[ToolSpec] | None
    ) -> PreparedChat:
        return self.plan.runtime.prepare(
            messages, tools, model=self.plan.model, call_key=f"{self.job.id}/{step}"
        )

    async def model_call(self, action: ModelStep) -> ModelReply | _End:
        step = action.step
        try:
            prepared = self.prepare_call(step, action.messages, action.tools)
        except DecisionProviderError as exc:
            return _End(self.escalate("provider_error", str(exc), step=step))
        if _now() >= self.deadline:
            late = await self.late(step, "the model call was not made")
            if isinstance(late, _End):
                return late
            return await self.settle_model(step, late)
        claim = await self.db(
            self.ledger.claim,
            job_id=self.job.id,
            step=step,
            provider=prepared.runtime,
            model=prepared.model,
            request_sha256=prepared.request_sha256,
            lease_expires=self.lease,
        )
        if not claim.fresh:
            return await self.settle_model(step, claim.call)
        self.owner.boundary("after_claim", self.job.id, step)
        sent = await self.send(step, prepared)
        if isinstance(sent, _End):
            return sent
        reply, receipt = sent
        self.owner.boundary("after_response", self.job.id, step)
        outcome = _outcome("answered", receipt, reply_outcome(reply), None)
        try:
            await self.db(self.ledger.record, job_id=self.job.id, outcome=outcome)
        except ClaimLost as lost:
            self.log.warning("call.claim_lost", step=step, stored=lost.call.status)
            return await self.settle_model(step, lost.call)
        self.owner.boundary("after_record", self.job.id, step)
        self.receipts.append(receipt)
        return reply

    async def send(self, step: str, prepared: PreparedChat) -> tuple[ModelReply, Receipt] | _End:
        """Send a claimed model call; a failure is the run's end, with the call's outcome."""
        runtime = self.plan.runtime
        observer = self.runner.observer
        observer.call_started(runtime.name)
        started = time.monotonic()
        try:
            result = await runtime.send(prepared, self.deadline, step=step)
        except DecisionProviderError as exc:
            status = ledger_status_for(exc)
            receipt = exc.receipt if isinstance(exc.receipt, Receipt) else self.bare(step, prepared)
            receipt = receipt.model_copy(update={"status": status, "error_code": exc.code})
            if status != "not_sent":
                self.runner.stats.add(receipt)
            observer.call_finished(
                runtime.name, status, time.monotonic() - started, receipt.cost_usd,
                receipt.cost_basis,
            )
            self.receipts.append(receipt)
            self.log.info("call.failed", step=step, code=exc.code, status=status)
            return _End(
                self.escalate(failure_reason(exc), str(exc), step=step),
                _outcome(status, receipt, None, exc.code),
                cancelled=was_cancelled(exc),
                step=step,
            )
        except asyncio.CancelledError:
            receipt = self.bare(step, prepared).model_copy(update={"error_code": "aborted"})
            self.receipts.append(receipt)
            message = self.escalate("decision_interrupted", "cancelled while in flight", step=step)
            outcome = _outcome("unknown", receipt, None, "aborted")
            return _End(message, outcome, cancelled=True, step=step)
        except Exception as exc:
            # A bug after the claim: whether bytes left is unknown, so never send again.
            self.log.exception("call.crashed", step=step, error=type(exc).__name__)
            receipt = self.bare(step, prepared).model_copy(update={"error_code": "internal"})
            self.receipts.append(receipt)
            detail = f"internal error: {type(exc).__name__}"
            message = self.escalate("decision_interrupted", detail, step=step)
            return _End(message, _outcome("unknown", receipt, None, "internal"), step=step)
        self.runner.stats.add(result.receipt)
        observer.call_finished(
            runtime.name, "answered", time.monotonic() - started, result.receipt.cost_usd,
            result.receipt.cost_basis,
        )
        self.log.info("call.answered", step=step, finish_reason=result.reply.finish_reason)
        return result.reply, result.receipt

    def bare(self, step: str, prepared: PreparedChat) -> Receipt:
        return Receipt(
            step=step,
            provider=prepared.runtime,
            model=prepared.model,
            status="unknown",
            request_sha256=prepared.request_sha256,
        )

    async def settle_model(self, step: str, call: CallRow) -> ModelReply | _End:
        """Another delivery claimed this model call: never send; replay, wait, or escalate."""
        got = await self.await_claim(step, call)
        if isinstance(got, _End):
            return got
        self.receipts.append(_stored_receipt(got))
        if got.status == "answered":
            self.log.info("call.replayed", step=step)
            return reply_from_outcome(got.outcome_json)
        if got.status == "failed":
            detail = f"the runtime failed: {got.error_code}"
            return _End(self.escalate("provider_error", detail, step=step))
        detail = (
            f"{step}: a delivery was interrupted with the model call possibly sent; "
            "it is never sent again"
        )
        return _End(self.escalate("decision_interrupted", detail, step=step))

    async def await_claim(self, step: str, call: CallRow) -> CallRow | _End:
        """Wait out a live duplicate's claim; an expired one is booked ``unknown``."""
        while call.status == "claimed":
            now = _now()
            if call.lease_expires < now:
                expired: CallRow = await self.db(
                    self.ledger.expire_claim, job_id=self.job.id, step=step, now=now
                )
                return expired
            await asyncio.sleep(min(CLAIM_POLL_S, (call.lease_expires - now).total_seconds()))
            row = await self.db(self.ledger.get_job, job_id=self.job.id)
            if row is not None and row.terminal_message is not None:
                return _End(row=row)
            latest = await self.db(self.ledger.get_call, job_id=self.job.id, step=step)
            assert latest is not None, "a claimed call never disappears"
            call = latest
        return call

    async def late(self, step: str, what: str) -> CallRow | _End:
        """Past the deadline: an earlier delivery's outcome of ``step`` stands, else nothing."""
        earlier = await self.db(self.ledger.get_call, job_id=self.job.id, step=step)
        if earlier is not None and earlier.status != "not_sent":
            row: CallRow = earlier
            return row
        detail = f"the deadline passed before {step}; {what}"
        return _End(self.escalate("deadline_exceeded", detail, step=step))

    # --- a handler's own model calls ---------------------------------------------------------

    def runtime_for(self, parent: str) -> BlockingRuntime:
        """The runtime a tool or handler gets: its model calls are ``{parent}.call.N``."""

        async def call(messages: list[Message], tools: list[ToolSpec] | None) -> ModelReply:
            return await self.nested_call(parent, messages, tools)

        return BlockingRuntime(call, loop=asyncio.get_running_loop())

    async def nested_call(
        self, parent: str, messages: list[Message], tools: list[ToolSpec] | None
    ) -> ModelReply:
        # The parent runs at most once, so its calls are always new claims.
        index = self.nested.get(parent, 0)
        self.nested[parent] = index + 1
        step = f"{parent}.call.{index}"
        prepared = self.prepare_call(step, messages, tools)
        if _now() >= self.deadline:
            raise DecisionProviderError(
                "timeout", "the deadline passed; nothing was sent", provider=prepared.runtime
            )
        claim = await self.db(
            self.ledger.claim,
            job_id=self.job.id,
            step=step,
            provider=prepared.runtime,
            model=prepared.model,
            request_sha256=prepared.request_sha256,
            lease_expires=self.lease,
        )
        if not claim.fresh:
            raise DecisionProviderError(
                "outcome_unknown", f"{step} was claimed before; it is never sent again",
                provider=prepared.runtime,
            )
        sent = await self.send(step, prepared)
        if isinstance(sent, _End):
            assert sent.outcome is not None
            await self.db(self.ledger.record, job_id=self.job.id, outcome=sent.outcome)
            raise DecisionProviderError(
                sent.outcome.error_code or "outcome_unknown",  # type: ignore[arg-type]
                f"{step} failed", provider=prepared.runtime,
            )
        reply, receipt = sent
        outcome = _outcome("answered", receipt, reply_outcome(reply), None)
        await self.db(self.ledger.record, job_id=self.job.id, outcome=outcome)
        self.receipts.append(receipt)
        return reply

    def with_runtime(
        self, option: FunctionOption, kwargs: dict[str, Any], parent: str
    ) -> dict[str, Any]:
        runtime_params = [p.name for p in option.params if p.source == "runtime"]
        if not runtime_params:
            return kwargs
        runtime = self.runtime_for(parent)
        return {**kwargs, **{name: runtime for name in runtime_params}}

    # --- tools and the handler ----------------------------------------------------------------

    async def claim_execution(
        self, step: str, name: str, request: dict[str, Any]
    ) -> CallRow | _End | None:
        """Claim a tool or handler run; ``None`` when this delivery may run it now."""
        if _now() >= self.deadline:
            return await self.late(step, f"{name} was not run")
        claim = await self.db(
            self.ledger.claim,
            job_id=self.job.id,
            step=step,
            provider=HANDLER_PROVIDER,
            model=name,
            request_sha256=digest_of(request),
            lease_expires=self.lease,
        )
        if not claim.fresh:
            stored: CallRow = claim.call
            return stored
        self.owner.boundary("after_claim", self.job.id, step)
        return None

    async def settle_execution(self, step: str, name: str, call: CallRow) -> CallRow | _End:
        """A run claimed by another delivery: its stored outcome, or an escalation."""
        got = await self.await_claim(step, call)
        if isinstance(got, _End):
            return got
        self.receipts.append(_stored_receipt(got))
        if got.status == "answered":
            self.log.info("handler.replayed", step=step, handler=name)
            return got
        if got.status == "failed":
            error = read_outcome(got.outcome_json).get("error", got.error_code)
            return _End(self.escalate("handler_failed", f"{name} raised {error}", step=step))
        detail = (
            f"{step}: {name} started and never recorded an outcome; it may have had its "
            "effect, so it is never run again"
        )
        return _End(self.escalate("handler_interrupted", detail, step=step))

    async def execute(
        self, step: str, name: str, option: FunctionOption, kwargs: dict[str, Any]
    ) -> tuple[Any, Receipt] | tuple[BaseException, Receipt]:
        started_at = _now()
        t0 = time.monotonic()
        failure: BaseException | None = None
        value: Any = None
        try:
            value = await asyncio.to_thread(option.func, **self.with_runtime(option, kwargs, step))
        except Exception as exc:
            failure = exc
            self.log.warning("handler.failed", step=step, handler=name, error=type(exc).__name__)
        receipt = Receipt(
            step=step,
            provider=HANDLER_PROVIDER,
            model=name,
            status="failed" if failure is not None else "answered",
            started_at=started_at,
            finished_at=_now(),
            latency_ms=round((time.monotonic() - t0) * 1000, 3),
            error_code="handler_error" if failure is not None else None,
        )
        return (failure, receipt) if failure is not None else (value, receipt)

    async def tool_call(self, action: ToolStep) -> str | _End:
        step, tool = action.step, action.tool
        name = tool.handler or tool.name
        args = {k: v for k, v in action.kwargs.items() if k not in tool.injected_names}
        request = {"tool": name, "args": args, "call_id": action.call.id}
        claimed = await self.claim_execution(step, name, request)
        if isinstance(claimed, _End):
            return claimed
        if claimed is not None:
            settled = await self.settle_execution(step, name, claimed)
            if isinstance(settled, _End):
                return settled
            content = read_outcome(settled.outcome_json).get("content")
            return content if isinstance(content, str) else ""
        result, receipt = await self.execute(step, name, tool, action.kwargs)
        receipt = receipt.model_copy(update={"request_sha256": digest_of(request)})
        self.owner.boundary("after_response", self.job.id, step)
        base = {"tool": name, "turn": self.turn, "call_id": action.call.id, "args": args}
        if receipt.status == "failed":
            assert isinstance(result, BaseException)
            error = error_text(result)
            self.receipts.append(receipt)
            outcome = _outcome(
                "failed", receipt, json.dumps({**base, "error": error, "head": error}),
                "handler_error",
            )
            message = self.escalate("handler_failed", f"tool {name} raised {error}", step=step)
            return _End(message, outcome, step=step)
        content = tool_content(result)
        stored = {**base, "content": content, "head": head_of(content)}
        outcome = _outcome("answered", receipt, json.dumps(stored, ensure_ascii=False), None)
        try:
            await self.db(self.ledger.record, job_id=self.job.id, outcome=outcome)
        except ClaimLost as lost:
            settled = await self.settle_execution(step, name, lost.call)
            return settled if isinstance(settled, _End) else content
        self.owner.boundary("after_record", self.job.id, step)
        self.receipts.append(receipt)
        return content

    async def resolve(self, pick: Pick) -> _End:
        option = pick.option
        if not isinstance(option, FunctionOption):
            value = jsonable(Decided(pick, 1).resolve())
            return _End(menu_result(self.job, value, list(self.receipts)))
        step, name = HANDLER_STEP, option.handler or option.name
        request = {"handler": name, "option": option.name, "args": pick.args}
        claimed = await self.claim_execution(step, name, request)
        if isinstance(claimed, _End):
            return claimed
        if claimed is not None:
            settled = await self.settle_execution(step, name, claimed)
            if isinstance(settled, _End):
                return settled
            value = read_outcome(settled.outcome_json).get("value")
            return _End(menu_result(self.job, value, list(self.receipts)))
        result, receipt = await self.execute(step, name, option, pick.kwargs)
        receipt = receipt.model_copy(update={"request_sha256": digest_of(request)})
        self.owner.boundary("after_response", self.job.id, step)
        self.receipts.append(receipt)
        if receipt.status == "failed":
            assert isinstance(result, BaseException)
            error = error_text(result)
            stored = {**request, "error": error, "head": error}
            outcome = _outcome("failed", receipt, json.dumps(stored), "handler_error")
            message = self.escalate("handler_failed", f"{name} raised {error}", step=step)
            return _End(message, outcome, step=step)
        value = jsonable(result)
        stored = {**request, "value": value, "head": head_of(value)}
        outcome = _outcome("answered", receipt, json.dumps(stored, ensure_ascii=False), None)
        return _End(menu_result(self.job, value, list(self.receipts)), outcome, step=step)

    # --- the end ---------------------------------------------------------------------------

    async def finish(self, end: _End) -> str:
        if end.row is not None:
            return await self.runner._publish(end.row, self.job.reply_to)
        message = end.message
        assert message is not None
        try:
            row = await self.store(message, end.outcome)
        except ClaimLost as lost:
            # The last call's lease ran out and another delivery booked it unknown: that
            # verdict stands; never overwrite it.
            self.log.warning("call.claim_lost", step=end.step, stored=lost.call.status)
            reason: EscalationReason = (
                "handler_interrupted"
                if lost.call.provider == HANDLER_PROVIDER
                else "decision_interrupted"
            )
            detail = f"{end.step}: its claim ran out before its outcome was recorded"
            row = await self.store(self.escalate(reason, detail, step=end.step), None)
        return await self.runner._publish(row, self.job.reply_to)

    async def store(self, message: Message_, outcome: CallOutcome | None) -> JobRow:
        row: JobRow = await self.db(
            self.ledger.finish_job,
            job_id=self.job.id,
            message_type=message.type,
            reason=getattr(message, "reason", None),
            message_json=message.to_json(),
            outcome=outcome,
        )
        self.owner.boundary("after_record", self.job.id, end_step(outcome))
        self.runner.observer.job_finished(
            "menu", self.plan.runtime.name, message.type, getattr(message, "reason", None)
        )
        self.log.info("job.finished", outcome=message.type, reason=getattr(message, "reason", None))
        return row


def end_step(outcome: CallOutcome | None) -> str:
    return outcome.step if outcome is not None else "(terminal)"
