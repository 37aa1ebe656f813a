"""The conformance suite every provider passes, each against the in-process faux.

Request counts are the faux's (what reached the host) and the ``Wire``'s (what the client
tried); "nothing sent" means both are zero.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from shared.canonical import canonical_bytes, sha256_hex
from shared.errors import DecisionProviderError
from worker.providers import call_status, was_cancelled
from worker.providers.httpbase import CALL_KEY_HEADER
from worker.providers.outbound import TransportPolicy
from worker.testing.faux import FauxBehaviour

from .support import CASE_IDS, CASES, FAST, Case, Rig, deadline

pytestmark = pytest.mark.usefixtures("keys")

CASES_WITH_KEY = [c for c in CASES if c.key_env]


async def _decide(rig: Rig, **changes: Any) -> Any:
    return await rig.provider.decide(rig.case.request(**changes), deadline())


async def _fails(rig: Rig, seconds: float = 10.0, **changes: Any) -> DecisionProviderError:
    with pytest.raises(DecisionProviderError) as info:
        await rig.provider.decide(rig.case.request(**changes), deadline(seconds))
    return info.value


# --- what is sent -------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_sends_one_canonical_request_with_key_and_call_header(case: Case, keys: str) -> None:
    rig = Rig.build(case)
    try:
        result = await _decide(rig)
    finally:
        await rig.aclose()
    assert len(rig.wire.requests) == 1 and rig.faux.total() == 1
    sent = rig.wire.requests[0]
    assert sent.method == "POST"
    assert sent.url.path == case.path
    body = sent.content
    assert body == canonical_bytes(json.loads(body)), "the body is canonical JSON"
    assert result.receipt.request_sha256 == sha256_hex(body)
    assert sent.headers[CALL_KEY_HEADER] == "job-1/decide"
    assert rig.faux.calls() == {"job-1/decide": 1}
    value = sent.headers.get(case.key_header)
    if case.key_env is None:
        assert value is not None and keys not in value
    elif case.bearer:
        assert value == f"Bearer {keys}"
    else:
        assert value == keys
    assert keys.encode() not in body


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_answered_receipt(case: Case) -> None:
    rig = Rig.build(case)
    try:
        result = await _decide(rig)
    finally:
        await rig.aclose()
    receipt = result.receipt
    assert receipt.status == "answered"
    assert receipt.provider == case.name
    assert receipt.transport_attempts == 1
    assert receipt.cost_basis == case.answered_basis
    if case.answered_basis is None:
        assert receipt.cost_usd is None, "an unknown cost is null, never 0"
    else:
        assert receipt.cost_usd is not None and receipt.cost_usd > 0
    assert (receipt.decision_id is not None) == case.has_decision_id
    assert set(result.answers) == {"is_urgent", "department", "frustration"}
    noul = result.answers["is_urgent"]
    assert isinstance(noul.value, bool) and noul.probability is not None
    assert noul.value == (noul.probability >= 0.5)
    assert receipt.confidence_source["is_urgent"] == "derived"
    assert noul.confidence == pytest.approx(2 * abs(noul.probability - 0.5))
    assert result.answers["department"].value in {"billing", "technical", "sales"}
    assert result.answers["frustration"].label in {"Calm", "Frustrated", "Very angry"}


def test_prepare_is_pure_and_reads_no_key(no_keys: None) -> None:
    for case in CASES:
        rig = Rig.build(case)
        prepared = rig.provider.prepare(case.request())
        assert prepared.request_sha256 == sha256_hex(prepared.body)
        assert not any(k.lower() in {"authorization", "x-api-key"} for k in prepared.headers)
        assert rig.wire.requests == [] and rig.faux.total() == 0


# --- limits: refused before anything is sent ---------------------------------------------


def _choice(n: int) -> dict[str, Any]:
    return {"type": "choice", "instructions": "pick", "criteria": {f"o{i}": None for i in range(n)}}


def _score(n: int) -> dict[str, Any]:
    return {"type": "score", "instructions": "rate", "criteria": [f"l{i}" for i in range(n)]}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    ("question", "field"),
    [
        (_choice(256), "questions.q.criteria"),
        (_score(1), "questions.q.criteria"),
        (_score(11), "questions.q.criteria"),
        ({"type": "box", "instructions": "where"}, "questions.q.type"),
    ],
    ids=["256-options", "1-level", "11-levels", "unknown-type"],
)
async def test_limits_refused_before_sending(
    case: Case, question: dict[str, Any], field: str
) -> None:
    rig = Rig.build(case)
    try:
        exc = await _fails(rig, questions={"q": question})
    finally:
        await rig.aclose()
    assert exc.code == "invalid_request"
    assert exc.field == field
    assert exc.attempts == 0
    assert rig.wire.requests == [] and rig.faux.total() == 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_one_option_choice_by_provider_limits(case: Case) -> None:
    rig = Rig.build(case)
    try:
        if case.min_choice_options > 1:
            exc = await _fails(rig, questions={"q": _choice(1)})
            assert exc.code == "invalid_request" and rig.faux.total() == 0
        else:
            result = await _decide(rig, questions={"q": _choice(1)})
            assert result.answers["q"].value == "o0"
    finally:
        await rig.aclose()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_state_of_wrong_type_refused(case: Case) -> None:
    rig = Rig.build(case)
    try:
        exc = await _fails(rig, state=42)
    finally:
        await rig.aclose()
    assert (exc.code, exc.field) == ("invalid_request", "state")
    assert rig.faux.total() == 0


@pytest.mark.parametrize("case", CASES_WITH_KEY, ids=[c.name for c in CASES_WITH_KEY])
async def test_missing_key_is_configuration_naming_the_variable(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert case.key_env is not None
    monkeypatch.setenv(case.key_env, "  ")
    rig = Rig.build(case)
    try:
        exc = await _fails(rig)
        monkeypatch.delenv(case.key_env)
        exc_unset = await _fails(rig)
    finally:
        await rig.aclose()
    for error in (exc, exc_unset):
        assert error.code == "configuration"
        assert case.key_env in str(error)
        assert error.attempts == 0
        assert error.receipt.status == "not_sent"
    assert rig.wire.requests == [] and rig.faux.total() == 0


async def test_key_is_read_at_send_time(monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in CASES if c.name == "openrouter")
    monkeypatch.delenv("OPENROUTER_API_KEY")
    rig = Rig.build(case)
    try:
        prepared = rig.provider.prepare(case.request())
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-late")
        await rig.provider.send(prepared, deadline())
    finally:
        await rig.aclose()
    assert rig.wire.requests[0].headers["authorization"] == "Bearer sk-late"


# --- errors by status, and what is sent again --------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "auth"),
        (403, "auth"),
        (400, "invalid_request"),
        (422, "invalid_request"),
        (413, "invalid_request"),
        (404, "invalid_request"),
    ],
)
async def test_definitive_statuses(case: Case, status: int, code: str) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="status", status_code=status))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == code and exc.status_code == status
    assert rig.faux.total() == 1, "a definitive answer is never sent again"
    assert exc.receipt.status == "failed" == call_status(exc)
    assert exc.receipt.error_code == code


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("status", [408, 500, 502, 503, 529])
async def test_unknown_outcome_statuses_are_sent_once(case: Case, status: int) -> None:
    # Even with a Retry-After: a 5xx may have been processed.
    rig = Rig.build(case, FauxBehaviour(mode="status", status_code=status, retry_after_s=0))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "outcome_unknown" and exc.status_code == status
    assert rig.faux.total() == 1
    assert exc.attempts == 1 and exc.receipt.transport_attempts == 1
    assert exc.receipt.status == "unknown"
    _assert_unknown_cost(case, exc)


def _assert_unknown_cost(case: Case, exc: DecisionProviderError) -> None:
    assert exc.cost_basis == case.unknown_basis
    assert exc.receipt.cost_basis == case.unknown_basis
    if case.unknown_basis is None:
        assert exc.cost_usd is None and exc.receipt.cost_usd is None
    else:
        assert exc.cost_usd is not None and exc.cost_usd > 0
        assert exc.receipt.cost_usd == pytest.approx(exc.cost_usd)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("mode", ["drop_after_read", "reset_after_read"])
async def test_connection_lost_after_sending_is_unknown_and_sent_once(
    case: Case, mode: str
) -> None:
    rig = Rig.build(case, FauxBehaviour(mode=mode))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "outcome_unknown"
    assert rig.faux.total() == 1 and len(rig.wire.requests) == 1
    _assert_unknown_cost(case, exc)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_never_sent_is_retried_then_answered(case: Case) -> None:
    rig = Rig.build(case, connect_failures=2)
    try:
        result = await _decide(rig)
    finally:
        await rig.aclose()
    assert rig.wire.refused == 2 and rig.faux.total() == 1
    assert result.receipt.transport_attempts == 3


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_never_sent_attempts_spent_is_connection(case: Case) -> None:
    rig = Rig.build(case, connect_failures=99)
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "connection"
    assert rig.wire.refused == FAST.max_attempts and rig.faux.total() == 0
    assert exc.attempts == FAST.max_attempts
    assert exc.receipt.status == "not_sent"
    assert exc.cost_usd is None


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_429_without_retry_after_is_rate_limited_sent_once(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="rate_limit"))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "rate_limited" and exc.retry_after_s is None
    assert rig.faux.total() == 1
    assert exc.receipt.status == "not_sent"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_429_with_retry_after_is_retried(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="rate_limit", retry_after_s=0.05, fail_first=1))
    try:
        result = await _decide(rig)
    finally:
        await rig.aclose()
    assert rig.faux.total() == 2
    assert result.receipt.transport_attempts == 2


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_429_until_attempts_spent_is_rate_limited(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="rate_limit", retry_after_s=0))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "rate_limited" and exc.retry_after_s == 0
    assert rig.faux.total() == FAST.max_attempts


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_429_retry_after_past_the_deadline_is_rate_limited_at_once(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="rate_limit", retry_after_s=30))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        exc = await _fails(rig, seconds=2)
    finally:
        await rig.aclose()
    assert exc.code == "rate_limited" and exc.retry_after_s == 30
    assert rig.faux.total() == 1
    assert loop.time() - started < 1, "it does not wait for a retry it cannot make"


# --- responses that do not fit ------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("mode", ["garbage", "deep_json", "bad_probabilities"])
async def test_invalid_responses(case: Case, mode: str) -> None:
    rig = Rig.build(case, FauxBehaviour(mode=mode))
    try:
        exc = await _fails(rig)
    finally:
        await rig.aclose()
    assert exc.code == "invalid_response"
    assert rig.faux.total() == 1
    assert exc.receipt.status == "failed"
    # Answered, so paid: booked from the body when it is readable, else as a lost outcome.
    expected = case.answered_basis if mode == "bad_probabilities" else case.unknown_basis
    assert exc.receipt.cost_basis == expected
    assert (exc.receipt.cost_usd is not None) == (expected is not None)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_refusals_stay_refusals(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="refuse", refuse_questions=("department",)))
    try:
        result = await _decide(rig)
    finally:
        await rig.aclose()
    refused = result.answers["department"]
    assert refused.refused and refused.value is None and refused.probability is None
    assert refused.confidence is None
    assert "department" not in result.receipt.confidence_source
    assert not result.answers["is_urgent"].refused


# --- deadlines and cancels ----------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_deadline_already_past_is_timeout_with_nothing_sent(case: Case) -> None:
    rig = Rig.build(case)
    try:
        exc = await _fails(rig, seconds=-1)
    finally:
        await rig.aclose()
    assert exc.code == "timeout" and exc.attempts == 0
    assert rig.wire.requests == []
    assert exc.receipt.status == "not_sent"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_deadline_ending_a_request_in_flight_is_unknown(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(latency_ms=2_000))
    try:
        exc = await _fails(rig, seconds=0.3)
    finally:
        await rig.aclose()
    assert exc.code == "outcome_unknown"
    assert rig.faux.total() == 1
    _assert_unknown_cost(case, exc)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_provider_timeout_shorter_than_deadline_is_unknown(case: Case) -> None:
    policy = TransportPolicy(timeout_s=0.2, max_attempts=3, backoff_base_s=0.01)
    rig = Rig.build(case, FauxBehaviour(latency_ms=2_000), policy=policy)
    try:
        exc = await _fails(rig, seconds=10)
    finally:
        await rig.aclose()
    assert exc.code == "outcome_unknown" and rig.faux.total() == 1


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_cancel_in_flight_is_unknown(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(latency_ms=5_000))
    task = asyncio.create_task(rig.provider.decide(case.request(), deadline()))
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        with pytest.raises(DecisionProviderError) as info:
            await task
    finally:
        await rig.aclose()
    assert info.value.code == "outcome_unknown" and was_cancelled(info.value)
    assert info.value.receipt.status == "unknown"
    assert rig.faux.total() == 1


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
async def test_cancel_between_attempts_is_aborted(case: Case) -> None:
    rig = Rig.build(case, FauxBehaviour(mode="rate_limit", retry_after_s=5))
    task = asyncio.create_task(rig.provider.decide(case.request(), deadline(30)))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if rig.faux.total():
            break
    await asyncio.sleep(0.05)
    task.cancel()
    try:
        with pytest.raises(DecisionProviderError) as info:
            await task
    finally:
        await rig.aclose()
    assert info.value.code == "aborted" and was_cancelled(info.value)
    assert info.value.receipt.status == "not_sent"
    assert rig.faux.total() == 1


@pytest.mark.parametrize("case", CASES_WITH_KEY, ids=[c.name for c in CASES_WITH_KEY])
async def test_a_key_given_directly_wins_and_stays_out_of_repr(case: Case, no_keys: None) -> None:
    rig = Rig.build(case)
    given = "sk-given-directly"
    paid = rig.provider._paid
    paid.auth = replace(paid.auth, fixed_key=given)  # type: ignore[arg-type]
    try:
        await _decide(rig)
    finally:
        await rig.aclose()
    value = rig.wire.requests[0].headers[case.key_header]
    assert value == (f"Bearer {given}" if case.bearer else given)
    assert given not in repr(paid.auth)
