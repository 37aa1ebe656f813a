"""The provider seam: what the runner needs from every decision provider.

A call goes in two halves so that the ledger can claim it in between:
``prepare(request)`` checks the provider's limits and builds the exact body (pure: nothing
is sent, no key is read), then ``send(prepared, deadline)`` reads the key, speaks HTTP under
the replay policy and returns the decoded answers with a receipt, or raises
``DecisionProviderError``. ``decide`` is both halves in one, for callers without a ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from shared.replies import Answer, Receipt

__all__ = [
    "DecisionProvider",
    "DecisionRequest",
    "PreparedRequest",
    "ProviderLimits",
    "ProviderResult",
    "ReplayPolicy",
]

ReplayPolicy = Literal["never"]


@dataclass(frozen=True)
class DecisionRequest:
    """What a job asks: a state and questions in the System One shape (``Question.wire()``)."""

    state: str | dict[str, Any] | list[Any]
    questions: dict[str, dict[str, Any]]
    model: str | None = None
    #: The ledger key of the call (job id + step); sent as a correlation header, never secret.
    call_key: str | None = None
    #: Images (experimental): asset key -> PNG/JPEG bytes, referenced by a ``<key>`` token in
    #: the state or a question (see ``worker.providers.images``).
    assets: Mapping[str, bytes] | None = None


@dataclass(frozen=True)
class ProviderLimits:
    max_questions: int | None = None
    min_choice_options: int = 1
    max_choice_options: int = 255
    min_score_levels: int = 2
    max_score_levels: int = 10
    max_rendered_question_chars: int | None = None
    max_state_bytes: int | None = None


@dataclass(frozen=True)
class PreparedRequest:
    """The exact request that will be sent: URL, body bytes and their digest. No key in it."""

    provider: str
    model: str | None
    url: str
    body: bytes
    request_sha256: str
    question_ids: tuple[str, ...]
    #: Headers other than auth (auth is added at send time from the key's variable).
    headers: dict[str, str] = field(default_factory=dict)
    #: Whatever the provider needs to decode the answer (e.g. OpenAI's question order).
    decode_hints: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderResult:
    answers: dict[str, Answer]
    receipt: Receipt


@runtime_checkable
class DecisionProvider(Protocol):
    name: str
    replay: ClassVar[ReplayPolicy]
    limits: ProviderLimits

    def models(self) -> tuple[str, ...]:
        """Models this provider serves; empty means it takes any model the host knows."""
        ...

    def default_model(self) -> str | None: ...

    def prepare(self, request: DecisionRequest, *, step: str = "decide") -> PreparedRequest:
        """Check limits and the model, build the body. ``invalid_request`` / ``configuration``."""
        ...

    async def send(
        self, prepared: PreparedRequest, deadline: datetime, *, step: str = "decide"
    ) -> ProviderResult:
        """Send under the replay policy, before ``deadline``; raise DecisionProviderError."""
        ...

    async def decide(
        self, request: DecisionRequest, deadline: datetime, *, step: str = "decide"
    ) -> ProviderResult:
        """``prepare`` then ``send``."""
        ...
