"""Packing many questions about one state into as few requests as a provider's limits allow.

The limits (``reference/decision-apis.md``):

- Parallel: 1 to 100 questions a request; a question renders to at most 5,000 characters
  (its canonical JSON, as ``worker.providers.limits`` measures it); 32k estimated tokens per
  question with the state.
- System One hosts (TypeSafe, OpenRouter, the faux, any host by URL): context of 32k tokens
  for the state plus the longest question, 64k for the state plus all questions; no cap on
  the number of questions.
- OpenAI Decisions documents no limit: *unconfirmed*, so System One's are applied (the safe
  reading: a request that fits those is small for any host).

Tokens are estimated as the providers and the faux estimate them, one token per 4 bytes of
canonical JSON (``shared.tokens``). "32k" is read as 32,000, the smaller reading.

``pack`` splits the questions *in order* into consecutive requests, each as full as the
limits allow. For an ordered split, filling each request before starting the next gives the
fewest requests (any split can be moved towards it without adding a request), and keeping the
order makes the steps (``sift.0``, ``sift.1``, ...) the same on every delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.canonical import canonical_bytes
from shared.errors import FieldProblem, JobInvalid
from shared.tokens import estimate_tokens

__all__ = [
    "PARALLEL_PACK_LIMITS",
    "SYSTEM_ONE_CONTEXT_TOKENS",
    "SYSTEM_ONE_PACK_LIMITS",
    "SYSTEM_ONE_REQUEST_TOKENS",
    "PackLimits",
    "fits",
    "pack",
    "pack_limits_for",
    "request_overhead",
    "split_in_order",
]

#: System One: the state plus the longest question.
SYSTEM_ONE_CONTEXT_TOKENS: Final = 32_000
#: System One: the state plus every question.
SYSTEM_ONE_REQUEST_TOKENS: Final = 64_000
PARALLEL_MAX_QUESTIONS: Final = 100
PARALLEL_MAX_QUESTION_CHARS: Final = 5_000
PARALLEL_CONTEXT_TOKENS: Final = 32_000


@dataclass(frozen=True)
class PackLimits:
    """What bounds one request; ``None`` is no bound."""

    max_questions: int | None = None
    #: A question's rendered size: characters of its canonical JSON.
    max_question_chars: int | None = None
    #: Estimated tokens of the state plus any one question.
    max_context_tokens: int | None = None
    #: Estimated tokens of the state plus all the request's questions.
    max_request_tokens: int | None = None


PARALLEL_PACK_LIMITS: Final = PackLimits(
    max_questions=PARALLEL_MAX_QUESTIONS,
    max_question_chars=PARALLEL_MAX_QUESTION_CHARS,
    max_context_tokens=PARALLEL_CONTEXT_TOKENS,
)
SYSTEM_ONE_PACK_LIMITS: Final = PackLimits(
    max_context_tokens=SYSTEM_ONE_CONTEXT_TOKENS,
    max_request_tokens=SYSTEM_ONE_REQUEST_TOKENS,
)
#: Providers by name whose limits are not System One's.
_BY_NAME: Final[Mapping[str, PackLimits]] = {"parallel": PARALLEL_PACK_LIMITS}


def pack_limits_for(provider: str) -> PackLimits:
    """The packing limits of a provider by its registry name (System One's unless named)."""
    return _BY_NAME.get(provider, SYSTEM_ONE_PACK_LIMITS)


def pack(
    state: Any,
    questions: Sequence[tuple[str, Mapping[str, Any]]],
    limits: PackLimits,
    *,
    field: str = "questions",
) -> list[list[int]]:
    """Indexes into ``questions``, split into requests in order.

    ``JobInvalid`` names the first question that fits in no request at all
    (``{field}.<i>``), so a job that cannot be sent is rejected before anything is.
    """
    state_size = len(canonical_bytes(state))
    empty_size = request_overhead(state)
    entries: list[int] = []
    for index, (qid, question) in enumerate(questions):
        encoded = canonical_bytes(question)
        _check_alone(index, encoded, state_size, empty_size, qid, limits, field)
        entries.append(len(canonical_bytes(qid)) + 1 + len(encoded))  # "id":{...}
    return split_in_order(
        len(entries),
        questions=lambda _: 1,
        entry_bytes=lambda index, _position: entries[index],
        empty_size=empty_size,
        limits=limits,
    )


def request_overhead(state: Any) -> int:
    """The bytes of ``{"questions":{},"state":...}``: a request with no question in it."""
    return len(canonical_bytes({"questions": {}, "state": state}))


def split_in_order(
    units: int,
    *,
    questions: Callable[[int], int],
    entry_bytes: Callable[[int, int], int],
    empty_size: int,
    limits: PackLimits,
    alone: Callable[[int], bool] = lambda _: False,
) -> list[list[int]]:
    """The one request splitter: units ``0..units-1`` split in order, each request as full
    as ``limits`` allow before the next starts.

    A unit is one question (``pack``) or one job's questions (``shared.packs``):
    ``questions(i)`` is how many it adds, ``entry_bytes(i, position)`` its bytes at that
    position in its request (a packed job's ids carry its position). A unit for which
    ``alone(i)`` holds gets a request of its own.
    """
    requests: list[list[int]] = []
    current: list[int] = []
    entries, count = 0, 0  # bytes of the current request's entries, and its questions
    for index in range(units):
        if alone(index):
            if current:
                requests.append(current)
                current, entries, count = [], 0, 0
            requests.append([index])
            continue
        added, more = entry_bytes(index, len(current)), questions(index)
        if current and not fits(count + more, empty_size + entries + added, limits):
            requests.append(current)
            current, entries, count = [], 0, 0
            added = entry_bytes(index, 0)
        current.append(index)
        entries, count = entries + added, count + more
    if current:
        requests.append(current)
    return requests


def fits(count: int, size: int, limits: PackLimits) -> bool:
    """Whether ``count`` questions whose entries and envelope take ``size`` bytes (the
    commas between entries added here) go in one request."""
    if limits.max_questions is not None and count > limits.max_questions:
        return False
    cap = limits.max_request_tokens
    return cap is None or estimate_tokens(size + max(count - 1, 0)) <= cap


def _check_alone(
    index: int,
    encoded: bytes,
    state_size: int,
    empty_size: int,
    qid: str,
    limits: PackLimits,
    field: str,
) -> None:
    where = f"{field}.{index}"
    chars = len(encoded.decode("utf-8"))
    if limits.max_question_chars is not None and chars > limits.max_question_chars:
        raise JobInvalid([FieldProblem(
            where, f"renders to {chars} characters; at most {limits.max_question_chars}"
        )])
    context = estimate_tokens(state_size + len(encoded))
    if limits.max_context_tokens is not None and context > limits.max_context_tokens:
        raise JobInvalid([FieldProblem(
            where, f"with the state it is about {context} tokens; "
            f"at most {limits.max_context_tokens}"
        )])
    alone = empty_size + len(canonical_bytes(qid)) + 1 + len(encoded)
    if not fits(1, alone, limits):
        raise JobInvalid([FieldProblem(
            where, f"a request with it alone is about {estimate_tokens(alone)} tokens; "
            f"at most {limits.max_request_tokens}"
        )])
