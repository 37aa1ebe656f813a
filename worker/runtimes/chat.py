"""The OpenAI-compatible chat-completions runtime: ``POST {base}{path}`` over httpx.

One class serves OpenRouter (``https://openrouter.ai/api``, ``usage.cost`` reported), OpenAI,
vLLM, any local server, and the faux, configured by base URL, key variable and model. Like
the decision providers, a call goes in two halves so the ledger can claim it in between:
``prepare`` builds the exact body (pure: no key is read, nothing is sent) and its digest;
``send`` speaks HTTP through the providers' replay-never transport
(``worker.providers.transport.send_never_replay``), so it has the same replay policy and the
same ``DecisionProviderError`` codes (``outcome_unknown`` for a request that may have been
received, ``connection`` for one that provably was not, ...). A 2xx whose body is not a chat
completion is ``invalid_response`` (answered, so paid: booked at its reported cost, if any).

Cost: ``usage.cost`` when the host reports it (OpenRouter), else unknown (``None``, never 0);
a request whose outcome is unknown is booked at an unknown cost.

``exec`` is the async form of the engine's ``Runtime.exec`` (prepare, then send, under a
deadline); ``worker.runtimes.BlockingRuntime`` serves the engine's synchronous protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final

import httpx

from shared.canonical import canonical_bytes, sha256_hex
from shared.errors import DecisionProviderError, NotStrictJSON
from shared.menus import Message, ModelReply, ToolSpec
from shared.outcomes import call_status
from shared.replies import CallStatus, Receipt
from shared.setting_types import ChatHost
from shared.settings import Settings
from worker.observability import tracing
from worker.providers.envelope import Clock, PaidHttp, answer_json
from worker.providers.httpbase import CALL_KEY_HEADER, header_value
from worker.providers.limiter import Limiter
from worker.providers.outbound import AuthSpec, TransportPolicy
from worker.providers.systemone import FAUX_KEY, faux_api_base
from worker.runtimes.wire import (
    ResponseInvalid,
    answered_model,
    decode_reply,
    error_details,
    reported_cost,
    response_id,
)

__all__ = [
    "CHAT_PATH",
    "FAUX_CHAT_MODEL",
    "ChatConfig",
    "ChatResult",
    "ChatRuntime",
    "PreparedChat",
]

CHAT_PATH: Final = "/v1/chat/completions"
#: The model the faux runtime asks for when a job names none.
FAUX_CHAT_MODEL: Final = "faux-chat-1"
#: The deadline of an ``exec`` called without one (the Python API).
DEFAULT_EXEC_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class ChatConfig:
    name: str
    base_url: str
    #: The key's variable, read by name at send time; ``None``: the host takes no key.
    key_env: str | None
    path: str = CHAT_PATH
    default_model: str | None = None
    #: Models served; empty means any model the host knows.
    models: tuple[str, ...] = ()
    #: Ask for usage accounting (OpenRouter: ``"usage": {"include": true}``).
    usage_include: bool = False
    #: A key given directly (wins over the variable), or the faux's placeholder.
    fixed_key: str | None = field(default=None, repr=False)
    #: The most tokens a reply may hold, sent as ``max_tokens_field`` (None: not sent).
    max_output_tokens: int | None = None
    max_tokens_field: str = "max_tokens"
    #: The most a million tokens, input or output, may cost (None: no known maximum).
    max_price_per_mtok_usd: float | None = None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.path

    @classmethod
    def openrouter(cls, settings: Settings) -> ChatConfig:
        return cls(
            name="openrouter",
            base_url=settings.openrouter_base_url,
            key_env="OPENROUTER_API_KEY",
            default_model=settings.openrouter_chat_model,
            usage_include=True,
        )

    @classmethod
    def openai(cls, settings: Settings) -> ChatConfig:
        return cls(
            name="openai",
            base_url=settings.openai_base_url,
            key_env="OPENAI_API_KEY",
            default_model=settings.openai_chat_model,
            max_tokens_field="max_completion_tokens",  # its reasoning models refuse max_tokens
        )

    @classmethod
    def faux(cls, settings: Settings) -> ChatConfig:
        """The faux as OpenRouter (``/api/v1/chat/completions``): ids and a reported cost."""
        base = faux_api_base(settings)
        return cls(
            name="faux",
            base_url=base,
            key_env=None,
            default_model=FAUX_CHAT_MODEL,
            usage_include=True,
            fixed_key=FAUX_KEY,
        )

    @classmethod
    def host(cls, name: str, host: ChatHost) -> ChatConfig:
        return cls(
            name=name,
            base_url=host.base_url,
            key_env=host.key_env,
            path=host.path,
            default_model=host.default_model,
            models=tuple(host.models),
            usage_include=host.usage_include,
            max_tokens_field=host.max_tokens_field,
        )

    def bounded(self, settings: Settings) -> ChatConfig:
        """This host with the settings' bounds on a call's cost: the reply's tokens
        (``menu_max_output_tokens``) and the price of its dearest token
        (``max_price_per_mtok_usd`` by this runtime's name)."""
        price = settings.max_price_per_mtok_usd.get(self.name, self.max_price_per_mtok_usd)
        return replace(
            self, max_output_tokens=settings.menu_max_output_tokens, max_price_per_mtok_usd=price
        )

    @property
    def unbounded(self) -> str | None:
        """What a call's cost lacks to have a known maximum (None: it has one)."""
        missing = []
        if self.max_output_tokens is None:
            missing.append("DECISIONS_MENU_MAX_OUTPUT_TOKENS")
        if self.max_price_per_mtok_usd is None:
            missing.append(f'DECISIONS_MAX_PRICE_PER_MTOK_USD (e.g. {{"{self.name}": 15}})')
        return " and ".join(missing) or None


@dataclass(frozen=True)
class PreparedChat:
    """The exact request: URL, body bytes and their digest. No key in it."""

    runtime: str
    model: str
    url: str
    body: bytes
    request_sha256: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatResult:
    reply: ModelReply
    receipt: Receipt
    #: The response as sent, for the ledger and the trace (the reply is decoded from it).
    raw: dict[str, object] = field(default_factory=dict)


class ChatRuntime:
    """One chat-completions host. ``prepare`` + ``send`` is one paid model call."""

    replay: ClassVar[str] = "never"

    def __init__(
        self,
        config: ChatConfig,
        *,
        http: httpx.AsyncClient,
        policy: TransportPolicy | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.config = config
        auth = (
            AuthSpec(env_var=config.key_env, fixed_key=config.fixed_key)
            if config.key_env or config.fixed_key
            else None
        )
        self._paid = PaidHttp(
            config.name, http, auth=auth, policy=policy or TransportPolicy(), limiter=limiter
        )

    def __repr__(self) -> str:
        return f"ChatRuntime({self.config.name!r}, {self.config.url!r})"

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def key_env(self) -> str | None:
        return self.config.key_env

    def default_model(self) -> str | None:
        return self.config.default_model

    def models(self) -> tuple[str, ...]:
        return self.config.models

    def model_problem(self, model: str | None) -> str | None:
        """What is wrong with asking for ``model`` (pure); ``None`` if it may be asked."""
        chosen = model or self.config.default_model
        if chosen is None:
            return f"runtime {self.name!r} needs a model and has no default; name one"
        if self.config.models and chosen not in self.config.models:
            return (
                f"runtime {self.name!r} does not serve {chosen!r}; "
                f"it serves {', '.join(self.config.models)}"
            )
        return None

    # --- the two halves ------------------------------------------------------------------

    def prepare(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        *,
        model: str | None = None,
        call_key: str | None = None,
    ) -> PreparedChat:
        problem = self.model_problem(model)
        if problem is not None:
            raise DecisionProviderError(
                "invalid_request", f"{problem}; nothing was sent", provider=self.name,
                field="runtime.model",
            )
        chosen = model or self.config.default_model
        assert chosen is not None
        body: dict[str, object] = {"model": chosen, "messages": list(messages)}
        if tools:
            body["tools"] = [t.to_json() for t in tools]
        if self.config.usage_include:
            body["usage"] = {"include": True}
        if self.config.max_output_tokens is not None:
            body[self.config.max_tokens_field] = self.config.max_output_tokens
        data = canonical_bytes(body)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if call_key:
            headers[CALL_KEY_HEADER] = header_value(call_key)
        return PreparedChat(self.name, chosen, self.config.url, data, sha256_hex(data), headers)

    def worst_cost(self, prepared: PreparedChat) -> float | None:
        """The most ``prepared`` can cost (what a budget reserves before it is sent): its
        bytes (a token is at least a byte) and the reply's bound, at the dearest token; None
        without both bounds (``ChatConfig.unbounded``)."""
        config = self.config
        if config.max_output_tokens is None or config.max_price_per_mtok_usd is None:
            return None
        tokens = len(prepared.body) + config.max_output_tokens
        return tokens * config.max_price_per_mtok_usd / 1_000_000

    async def send(
        self, prepared: PreparedChat, deadline: datetime, *, step: str = "chat"
    ) -> ChatResult:
        """One paid model call, in its trace span (``worker.observability.tracing``)."""
        with tracing.call_span(
            "chat", provider=self.name, model=prepared.model, step=step
        ) as span:
            result = await self._send(prepared, deadline, step=step)
            if span is not None:
                tokens = tracing.input_tokens(result.raw, "prompt_tokens")
                tracing.annotate(span, **{"gen_ai.usage.input_tokens": tokens})
                tracing.record(span, result.receipt)
            return result

    async def _send(self, prepared: PreparedChat, deadline: datetime, *, step: str) -> ChatResult:
        def failed(exc: DecisionProviderError, clock: Clock) -> Receipt:
            return self._receipt(
                prepared, step, call_status(exc), clock, attempts=exc.attempts,
                cost=exc.cost_usd, error_code=exc.code, ref_id=exc.ref_id,
            )

        exchange = await self._paid.post(
            prepared.url, prepared.body, prepared.headers, deadline, clock=Clock.start(),
            failed=failed, error_details=error_details,
        )
        response, clock = exchange.response, exchange.clock
        body: object = None
        try:
            # Without the key it was sent: the reply is kept, replayed and escalated whole.
            # Strict UTF-8 JSON (``answer_json``): a UTF-16 body hid the key from the scrub.
            body = answer_json(self._paid.foreign_body(response.body))
            reply = decode_reply(body)
        # RecursionError: JSON nested deeper than the parser goes (a 200 KB body can be).
        except (ValueError, RecursionError, ResponseInvalid) as exc:
            if isinstance(exc, RecursionError):
                message = "the body is JSON nested too deep to read"
            elif isinstance(exc, ResponseInvalid):
                message = self._paid.foreign_detail(str(exc))
            elif isinstance(exc, NotStrictJSON):
                message = f"the body is not strict JSON: {exc}"
            else:
                message = "the body is not JSON"
            cost = reported_cost(body)
            error = DecisionProviderError(
                "invalid_response", message, provider=self.name,
                status_code=response.status_code, attempts=response.attempts,
                cost_usd=cost, cost_basis="reported" if cost is not None else None,
            )
            error.receipt = self._receipt(
                prepared, step, "failed", clock, attempts=response.attempts,
                cost=cost, error_code="invalid_response", decision_id=response_id(body),
            )
            raise error from None
        assert isinstance(body, dict)
        receipt = self._receipt(
            prepared, step, "answered", clock, attempts=response.attempts,
            cost=reported_cost(body), decision_id=response_id(body),
            model=answered_model(body, prepared.model),
        )
        return ChatResult(reply=reply, receipt=receipt, raw=body)

    async def exec(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        model: str | None = None,
        deadline: datetime | None = None,
        step: str = "chat",
        call_key: str | None = None,
    ) -> ModelReply:
        """One model call outside the ledger (the Python API): prepare, then send."""
        prepared = self.prepare(messages, tools, model=model, call_key=call_key)
        until = deadline or datetime.now(UTC) + timedelta(seconds=DEFAULT_EXEC_TIMEOUT_S)
        return (await self.send(prepared, until, step=step)).reply

    def _receipt(
        self,
        prepared: PreparedChat,
        step: str,
        status: CallStatus,
        clock: Clock,
        *,
        attempts: int,
        cost: float | None,
        error_code: str | None = None,
        ref_id: str | None = None,
        decision_id: str | None = None,
        model: str | None = None,
    ) -> Receipt:
        return Receipt(
            step=step,
            provider=self.name,
            model=model or prepared.model,
            decision_id=decision_id,
            status=status,
            cost_usd=round(cost, 12) if cost is not None else None,
            cost_basis="reported" if cost is not None else None,
            transport_attempts=attempts,
            started_at=clock.started_at,
            finished_at=datetime.now(UTC),
            latency_ms=round(clock.elapsed_s() * 1000, 3),
            request_sha256=prepared.request_sha256,
            error_code=error_code,
            ref_id=ref_id,
        )
