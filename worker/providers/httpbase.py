"""What every HTTP decision provider shares: the model check, building the exact request,
sending it through the replay-never transport, and the receipt of every outcome.

A subclass says how to build its body (``prepare``) and how to read its answers, id, cost
and evidence; the sending, the error handling and the receipts are here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Final
from urllib.parse import quote

import httpx

from shared.canonical import canonical_bytes, sha256_hex
from shared.decoding import MissingAnswer
from shared.errors import DecisionProviderError, NotStrictJSON
from shared.outcomes import call_status
from shared.replies import Answer, CallStatus, ConfidenceSource, CostBasis, Evidence, Receipt
from worker.observability import tracing
from worker.providers.base import (
    DecisionRequest,
    PreparedRequest,
    ProviderLimits,
    ProviderResult,
    ReplayPolicy,
)
from worker.providers.envelope import Clock, PaidHttp, answer_json
from worker.providers.limiter import Limiter
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetails,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
    read_key,
)

__all__ = ["CALL_KEY_HEADER", "HttpDecisionProvider", "per_token_worst"]

#: The ledger key of the call, so a fake (and the fault suite) can count sends per job step.
CALL_KEY_HEADER: Final = "X-Decisions-Call"
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def per_token_worst(prepared: PreparedRequest, price_per_mtok_usd: float | None) -> float | None:
    """``prepared``'s bytes as tokens at ``price_per_mtok_usd``: an upper bound of what a host
    pricing input tokens (output free) can charge for it (a token is at least a byte)."""
    if price_per_mtok_usd is None:
        return None
    return price_per_mtok_usd * len(prepared.body) / 1_000_000


def header_value(text: str) -> str:
    """``text`` as a header value: printable ASCII kept, anything else percent-encoded."""
    return quote(text, safe=_HEADER_SAFE)


class HttpDecisionProvider:
    """Base of the providers that speak HTTP with the replay policy ``never``."""

    replay: ClassVar[ReplayPolicy] = "never"
    #: What a question left out of the answers means (the table in
    #: ``shared.decoding``): System One hosts leave a refused question out.
    missing_answer: ClassVar[MissingAnswer] = "refused"
    #: Inputs this provider takes on an experimental footing (``image``).
    experimental_inputs: tuple[str, ...] = ()

    def __init__(
        self,
        name: str,
        *,
        http: httpx.AsyncClient,
        auth: AuthSpec | None,
        limits: ProviderLimits,
        policy: TransportPolicy | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        self._paid = PaidHttp(
            name, http, auth=auth, policy=policy or TransportPolicy(), limiter=limiter
        )

    # --- what a subclass says -------------------------------------------------------------

    def models(self) -> tuple[str, ...]:
        return ()

    def default_model(self) -> str | None:
        return None

    @property
    def policy(self) -> TransportPolicy:
        """Timeouts, attempts and backoff of this provider's sends (from the settings)."""
        return self._paid.policy

    @property
    def key_env(self) -> str | None:
        """The variable the key is read from (by name, at send time); ``None``: no key."""
        return self._paid.auth.env_var if self._paid.auth else None

    @property
    def key_is_set(self) -> bool:
        """Whether a key would be found now and sent (never the key itself): a key the send
        would refuse (``read_key``: a line break inside it, say) is as good as none."""
        return self.key_problem is None

    @property
    def key_problem(self) -> str | None:
        """Why no key would be sent now, naming its variable (never the key); None if one
        would. Said by ``decisions providers`` beside "key set: no" (found by an attack: an
        operator who had set the variable was told only "no")."""
        if self._paid.auth is None:
            return None
        try:
            read_key(self._paid.auth, self.name)
        except DecisionProviderError as exc:
            return (exc.detail or exc.code).removesuffix("; nothing was sent")
        return None

    def prepare(self, request: DecisionRequest, *, step: str = "decide") -> PreparedRequest:
        raise NotImplementedError

    def _answers(self, prepared: PreparedRequest, body: Any) -> dict[str, Answer]:
        raise NotImplementedError

    def _decision_id(self, response: TransportResponse, body: Any) -> str | None:
        return None

    def _cost(
        self, prepared: PreparedRequest, body: Any
    ) -> tuple[float | None, CostBasis | None]:
        return None, None

    def _unknown_cost(self, prepared: PreparedRequest) -> UnknownCost:
        return UnknownCost()

    def unknown_cost(self, prepared: PreparedRequest) -> UnknownCost:
        """What a sent request whose outcome is unknown is booked at (also when its worker
        died with it in flight, which the ledger learns only later)."""
        return self._unknown_cost(prepared)

    def worst_cost(
        self, prepared: PreparedRequest, max_price_per_mtok_usd: float | None
    ) -> float | None:
        """The most ``prepared`` can cost (what a budget reserves before it is sent); None:
        no known maximum. By default the request's bytes at ``max_price_per_mtok_usd`` (a
        token is at least a byte, so its tokens are at most its bytes)."""
        return per_token_worst(prepared, max_price_per_mtok_usd)

    def _evidence(self, body: Any) -> list[Evidence]:
        return []

    def _answered_model(self, prepared: PreparedRequest, body: Any) -> str | None:
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else prepared.model

    def _error_details(self, status: int, headers: httpx.Headers, body: bytes) -> ErrorDetails:
        return ErrorDetails()

    async def _before_send(self, prepared: PreparedRequest, deadline: datetime) -> None:
        """Checks that need I/O but no paid request (the image catalog)."""

    # --- shared helpers -------------------------------------------------------------------

    def resolve_model(self, model: str | None) -> str | None:
        """The model to ask: the request's or the default; ``invalid_request`` if not served."""
        chosen = model or self.default_model()
        served = self.models()
        if chosen is None and self._model_required():
            raise DecisionProviderError(
                "invalid_request",
                "model: this provider needs a model and has no default; nothing was sent",
                provider=self.name, field="model",
            )
        if chosen is not None and served and chosen not in served:
            raise DecisionProviderError(
                "invalid_request",
                f"model: {chosen!r} is not served here (serves {', '.join(served)}); "
                "nothing was sent",
                provider=self.name, field="model",
            )
        return chosen

    def _model_required(self) -> bool:
        return True

    def _prepared(
        self,
        request: DecisionRequest,
        *,
        model: str | None,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        hints: Mapping[str, Any] | None = None,
    ) -> PreparedRequest:
        data = canonical_bytes(body)
        sent_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        sent_headers.update(headers or {})
        if request.call_key:
            sent_headers[CALL_KEY_HEADER] = header_value(request.call_key)
        return PreparedRequest(
            provider=self.name,
            model=model,
            url=url,
            body=data,
            request_sha256=sha256_hex(data),
            question_ids=tuple(request.questions),
            headers=sent_headers,
            decode_hints=dict(hints or {}),
        )

    # --- the seam -------------------------------------------------------------------------

    async def decide(
        self, request: DecisionRequest, deadline: datetime, *, step: str = "decide"
    ) -> ProviderResult:
        return await self.send(self.prepare(request, step=step), deadline, step=step)

    async def send(
        self, prepared: PreparedRequest, deadline: datetime, *, step: str = "decide"
    ) -> ProviderResult:
        """The one send of every HTTP provider, in its trace span
        (``worker.observability.tracing``)."""
        with tracing.call_span(
            "decide", provider=self.name, model=prepared.model, step=step
        ) as span:
            result = await self._send(prepared, deadline, step=step)
            tracing.record(span, result.receipt)
            return result

    async def _send(
        self, prepared: PreparedRequest, deadline: datetime, *, step: str
    ) -> ProviderResult:
        def failed(exc: DecisionProviderError, clock: Clock) -> Receipt:
            return self._receipt(
                prepared, step, call_status(exc), clock,
                attempts=exc.attempts, cost=(exc.cost_usd, exc.cost_basis),
                error_code=exc.code, ref_id=exc.ref_id,
            )

        async def before(aware_deadline: datetime) -> None:
            await self._before_send(prepared, aware_deadline)

        clock = Clock.start()
        exchange = await self._paid.post(
            prepared.url, prepared.body, prepared.headers, deadline, clock=clock, failed=failed,
            unknown_cost=self._unknown_cost(prepared), error_details=self._error_details,
            before=before,
        )
        response = exchange.response
        body: Any = None
        try:
            body = answer_json(response.body)
            if tracing.enabled():
                tracing.annotate(**{"gen_ai.usage.input_tokens": tracing.input_tokens(body)})
            answers = self._answers(prepared, body)
        # RecursionError: JSON nested deeper than the parser goes (a 200 KB body can be).
        except (ValueError, RecursionError, DecisionProviderError) as exc:
            raise self._invalid_response(
                prepared, step, response, body, exc, clock
            ) from None
        sources: dict[str, ConfidenceSource] = {
            qid: a.confidence_source for qid, a in answers.items() if a.confidence_source
        }
        receipt = self._receipt(
            prepared, step, "answered", clock,
            attempts=response.attempts,
            cost=self._cost(prepared, body),
            decision_id=self._decision_id(response, body),
            model=self._answered_model(prepared, body),
            confidence_source=sources,
            evidence=self._evidence(body),
        )
        return ProviderResult(answers=answers, receipt=receipt)

    def _invalid_response(
        self,
        prepared: PreparedRequest,
        step: str,
        response: TransportResponse,
        body: Any,
        cause: Exception,
        clock: Clock,
    ) -> DecisionProviderError:
        if isinstance(cause, DecisionProviderError):
            # It may quote the host (question ids it was not asked): keyless and bounded.
            message = self._paid.foreign_detail(cause.detail)
        elif isinstance(cause, RecursionError):
            message = "the response body is JSON nested too deep to read"
        elif isinstance(cause, NotStrictJSON):
            message = f"the response body is not strict JSON: {cause}"
        else:
            message = "the response body is not JSON"
        # The request was answered, so it was paid: book what the body says, or the rule for
        # a lost outcome when it says nothing readable.
        try:
            cost = self._cost(prepared, body) if isinstance(body, dict) else (None, None)
        except Exception:
            cost = (None, None)
        if cost[0] is None:
            unknown = self._unknown_cost(prepared)
            cost = (unknown.usd, unknown.basis)
        try:
            decision_id = self._decision_id(response, body)
        except Exception:
            decision_id = None
        error = DecisionProviderError(
            "invalid_response", message, provider=self.name, status_code=response.status_code,
            cost_usd=cost[0], cost_basis=cost[1], attempts=response.attempts,
        )
        error.receipt = self._receipt(
            prepared, step, "failed", clock, attempts=response.attempts, cost=cost,
            error_code="invalid_response", decision_id=decision_id,
        )
        return error

    def _receipt(
        self,
        prepared: PreparedRequest,
        step: str,
        status: CallStatus,
        clock: Clock,
        *,
        attempts: int,
        cost: tuple[float | None, CostBasis | None],
        error_code: str | None = None,
        ref_id: str | None = None,
        decision_id: str | None = None,
        model: str | None = None,
        confidence_source: dict[str, ConfidenceSource] | None = None,
        evidence: list[Evidence] | None = None,
    ) -> Receipt:
        usd, basis = cost
        if usd is not None:
            usd = round(usd, 12)  # float noise of price * tokens, well below a micro-dollar
        # What the host wrote goes into the receipt only without the key it was sent.
        paid = self._paid
        if evidence:
            evidence = [_without_key(paid, e) for e in evidence]
        return Receipt(
            step=step,
            provider=self.name,
            model=paid.foreign(model, repeats=True) or prepared.model,
            decision_id=paid.foreign(decision_id),
            status=status,
            cost_usd=usd,
            cost_basis=basis if usd is not None else None,
            confidence_source=confidence_source or {},
            evidence=evidence or [],
            transport_attempts=attempts,
            started_at=clock.started_at,
            finished_at=datetime.now(UTC),
            latency_ms=round(clock.elapsed_s() * 1000, 3),
            request_sha256=prepared.request_sha256,
            error_code=error_code,
            ref_id=paid.foreign(ref_id),
            replayed=False,
        )


def _without_key(paid: PaidHttp, evidence: Evidence) -> Evidence:
    """A citation the host gave, its texts without the key it was sent."""
    return evidence.model_copy(
        update={
            "url": paid.foreign_text(evidence.url),
            "title": None if evidence.title is None else paid.foreign_text(evidence.title),
            "excerpts": [paid.foreign_text(e) for e in evidence.excerpts],
        }
    )
