"""The worker's spans: the task, one per provider or chat call, publish, escalation, claims.

Built on ``shared.tracing`` (off unless an OTLP endpoint is set; then nothing here costs more
than one global read). A provider call's span follows OpenTelemetry's GenAI semantic
conventions, plus the project's own attributes:

=============================  ==========================================================
attribute                      value
=============================  ==========================================================
``gen_ai.operation.name``      ``decide`` (a decision provider) or ``chat`` (a menu model)
``gen_ai.provider.name``       the provider or runtime name (``openrouter``, ``parallel``)
``gen_ai.request.model``       the model asked
``gen_ai.response.model``      the model that answered, when the response says
``gen_ai.response.id``         the provider's decision or response id
``gen_ai.usage.input_tokens``  where the response reports it
``error.type``                 the error code (``outcome_unknown``, ``connection``, ...)
``decisions.step``             the job step (``decide``, ``verify.0``, ``pick.0``, ...)
``decisions.call.status``      the ledger's call status (``answered``, ``unknown``, ...)
``decisions.cost_usd``         the cost booked, when known
``decisions.cost_basis``       ``reported`` or ``estimate``
``decisions.transport.attempts``  sends of the request (never-sent retries, 429 waits)
=============================  ==========================================================

Never a key, a header, a state, a question, a prompt or an answer: only what is above.

Other spans: ``claim_span(job_id=..., step=...)`` around every ledger claim
(``worker.delivery.ledger_io``), ``publish_span(...)`` around every terminal message's and
rejection's publish (``worker.delivery.outbox``; an escalation's is named ``ESCALATION_SPAN``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

from shared.errors import DecisionProviderError
from shared.replies import Receipt
from shared.tracing import NO_SPAN, annotate, configure, continued, enabled, flush, span

__all__ = [
    "CLAIM_SPAN",
    "ESCALATION_SPAN",
    "PUBLISH_SPAN",
    "TASK_SPAN",
    "annotate",
    "call_span",
    "claim_span",
    "configure",
    "continued",
    "enabled",
    "flush",
    "input_tokens",
    "publish_span",
    "record",
    "span",
]

TASK_SPAN: Final = "decisions.run_jobs"
CLAIM_SPAN: Final = "decisions.ledger.claim"
PUBLISH_SPAN: Final = "decisions.publish"
ESCALATION_SPAN: Final = "decisions.escalate"


@contextmanager
def _call(operation: str, provider: str, model: str | None, step: str) -> Iterator[Any]:
    with span(
        f"{operation} {model}" if model else operation,
        kind="client",
        **{
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "decisions.step": step,
        },
    ) as current:
        try:
            yield current
        except DecisionProviderError as exc:
            record(current, exc.receipt, error=exc.code)
            raise


def call_span(
    operation: str, *, provider: str, model: str | None, step: str
) -> AbstractContextManager[Any]:
    """One provider (``decide``) or chat (``chat``) call's span; ``record(span, receipt)`` it
    when answered. A ``DecisionProviderError`` leaving it is recorded from its receipt."""
    if not enabled():
        return NO_SPAN
    return _call(operation, provider, model, step)


def record(current: Any, receipt: Receipt | None, *, error: str | None = None) -> None:
    """A call's outcome on its span: status, cost, basis, attempts, answering model, id."""
    if current is None or receipt is None:
        return
    annotate(
        current,
        **{
            "gen_ai.response.model": receipt.model,
            "gen_ai.response.id": receipt.decision_id,
            "error.type": error,
            "decisions.call.status": receipt.status,
            "decisions.cost_usd": receipt.cost_usd,
            "decisions.cost_basis": receipt.cost_basis,
            "decisions.transport.attempts": receipt.transport_attempts,
        },
    )


def input_tokens(body: Any, *names: str) -> int | None:
    """``body.usage.<name>`` for the first name present as a non-negative int, else None."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    for name in names or ("input_tokens",):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def claim_span(
    *, job_id: str, step: str, provider: str | None = None
) -> AbstractContextManager[Any]:
    """Around one ledger claim of a call (before its paid request is sent)."""
    if not enabled():
        return NO_SPAN
    attributes: dict[str, Any] = {
        "decisions.job_id": job_id,
        "decisions.step": step,
        "gen_ai.provider.name": provider,
    }
    return span(CLAIM_SPAN, **attributes)


def publish_span(
    *, stream: str, job_id: str, message_type: str, escalation: bool
) -> AbstractContextManager[Any]:
    """Around one terminal message's publish; an escalation's span is ``ESCALATION_SPAN``."""
    if not enabled():
        return NO_SPAN
    return span(
        ESCALATION_SPAN if escalation else PUBLISH_SPAN,
        kind="producer",
        **{
            "messaging.destination.name": stream,
            "decisions.job_id": job_id,
            "decisions.message_type": message_type,
        },
    )
