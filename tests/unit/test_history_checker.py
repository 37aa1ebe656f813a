"""The history checker itself: a clean hand-made history passes, and each property fails on
a history that breaks it (and only that property)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.history import (
    Booking,
    Entry,
    History,
    ResolveAttempt,
    check_history,
    costs_match,
    handler_runs_at_most_once,
    one_terminal_per_job,
    requests_at_most_once,
    resolved_at_most_once,
)

S = "tenant:replies"
OTHER = "tenant-b:replies"
PRICE = 0.001


def clean() -> History:
    """Three jobs: a decide answered, a packed pair (one request), a menu whose handler ran
    and whose escalation-free twin escalated and was resolved once by two competing
    reviewers (one refused)."""
    return History(
        submitted={"d1": S, "p1": S, "p2": S, "m1": S, "e1": S},
        requests={"h-d1": 1, "h-pack": 1, "h-m1": 1, "h-e1": 1},
        requests_by_call={"d1/decide": 1, "pack:k/decide": 1, "m1/pick.0": 1, "e1/decide": 1},
        handler_runs=[("m1", "refund")],
        entries=[
            Entry(S, "d1", "result", '{"a": 1}'),
            Entry(S, "p1", "result", '{"a": 2}'),
            Entry(S, "p2", "result", '{"a": 3}'),
            Entry(S, "m1", "result", '{"a": 4}'),
            Entry(S, "e1", "escalation", '{"a": 5}'),
            Entry(S, "e1", "resolution", '{"a": 6}'),
        ],
        bookings=[
            Booking("d1", "decide", "faux", "answered", "h-d1", PRICE),
            Booking("p1", "decide", "faux", "answered", "h-pack", PRICE / 2, "k"),
            Booking("p2", "decide", "faux", "answered", "h-pack", PRICE / 2, "k"),
            Booking("m1", "pick.0", "openrouter", "answered", "h-m1", 0.0002),
            Booking("m1", "handler", "local", "answered", None, None),
            # The provider got it, the answer was lost: unknown, booked null (never 0).
            Booking("e1", "decide", "faux", "unknown", "h-e1", None),
        ],
        prices={"h-d1": PRICE, "h-pack": PRICE, "h-m1": 0.0002, "h-e1": PRICE},
        resolve_attempts=[ResolveAttempt("e1", "ana", True), ResolveAttempt("e1", "bo", False)],
    )


def test_a_clean_history_passes_with_its_figures() -> None:
    figures = check_history(clean(), {"d1": "decide", "p1": "packed", "p2": "packed"})
    assert figures.requests == 4 and figures.request_duplicates == 0
    assert figures.terminal_messages == 5 and figures.resolutions == 1
    assert figures.resolve_refused == 1 and figures.unknown_cost_rows == 1
    assert figures.jobs_by_kind == {"decide": 1, "packed": 2, "?": 2}
    assert figures.booked_by_provider["faux"] == pytest.approx(2 * PRICE)


def broken(prop_name: str, history: History) -> list[str]:
    """The problems of ``history``, asserting that only ``prop_name`` found any."""
    with pytest.raises(AssertionError) as caught:
        check_history(history)
    text = str(caught.value)
    assert f"[{prop_name}]" in text
    others = [line for line in text.splitlines()[1:] if f"[{prop_name}]" not in line]
    assert not others, others
    return text.splitlines()[1:]


def test_a_request_received_twice_by_digest() -> None:
    h = clean()
    h.requests["h-d1"] = 2
    h.prices["h-d1"] = PRICE
    h.bookings[0] = replace(h.bookings[0], cost_usd=2 * PRICE)  # costs stay honest
    assert requests_at_most_once(h) == [
        "request h-d1 reached the provider 2x (ledger: d1/decide answered)"
    ]
    broken("requests at most once", h)


def test_two_calls_with_one_body_may_each_reach_the_provider_once() -> None:
    # A high-stakes verify asks one checker twice: two claimed calls, one body.
    h = clean()
    h.submitted["v1"] = S
    h.entries.append(Entry(S, "v1", "result", "{}"))
    h.requests.update({"h-v": 2})
    h.requests_by_call.update({"v1/verify.0": 1, "v1/verify.1": 1})
    h.bookings += [
        Booking("v1", "verify.0", "faux", "answered", "h-v", PRICE),
        Booking("v1", "verify.1", "faux", "answered", "h-v", PRICE),
    ]
    h.prices["h-v"] = PRICE
    check_history(h)
    h.requests["h-v"] = 3  # a third time is a duplicate (and unbooked)
    assert requests_at_most_once(h) == [
        "request h-v reached the provider 3x (ledger: v1/verify.0 answered, v1/verify.1 answered)"
    ]


def test_a_call_key_received_twice_with_different_bodies() -> None:
    h = clean()
    h.requests_by_call["d1/decide"] = 2
    assert requests_at_most_once(h) == ["call d1/decide reached the provider 2x"]
    broken("requests at most once", h)


def test_a_handler_run_twice() -> None:
    h = clean()
    h.handler_runs.append(("m1", "refund"))
    assert handler_runs_at_most_once(h) == ["m1: handler refund ran 2x"]
    broken("handler runs at most once", h)


def test_a_different_handler_per_job_is_not_a_duplicate() -> None:
    h = clean()
    h.handler_runs += [("m1", "lookup"), ("m2", "refund")]
    assert handler_runs_at_most_once(h) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda h: h.entries.remove(h.entries[0]), "d1: no terminal message on"),
        (lambda h: h.entries.append(Entry(S, "d1", "result", '{"a": 1}')), "d1: 2 terminal"),
        (lambda h: h.entries.append(Entry(S, "d1", "escalation", "{}")), "d1: 2 terminal"),
        (lambda h: h.entries.append(Entry(OTHER, "d1", "result", "{}")), "not its own stream"),
        (lambda h: h.entries.append(Entry(S, "ghost", "rejected", "{}")), "ghost: 1 terminal"),
    ],
    ids=["lost", "raw-duplicate", "two-different", "other-stream", "never-submitted"],
)
def test_terminal_messages_not_exactly_one_on_its_own_stream(change: object, expected: str) -> None:
    h = clean()
    change(h)  # type: ignore[operator]
    problems = one_terminal_per_job(h)
    assert len(problems) == 1 and expected in problems[0], problems
    broken("one terminal message per job", h)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda h: h.entries.append(Entry(S, "e1", "resolution", '{"b": 1}')), "resolved 2x"),
        (
            lambda h: h.resolve_attempts.append(ResolveAttempt("e1", "bo", True)),
            "2 reviewers were told",
        ),
        (lambda h: h.entries.append(Entry(S, "d1", "resolution", "{}")), "never escalated"),
        # Told it worked, yet another answer is the one on the stream (issue 15, defect 9).
        (
            lambda h: (
                h.entries.pop(),
                h.resolve_attempts.__setitem__(0, ResolveAttempt("e1", "ana", True)),
            ),
            "1 reviewer(s) told resolved, 0 resolution(s) published",
        ),
    ],
    ids=["published-twice", "two-told", "not-escalated", "told-but-not-published"],
)
def test_an_escalation_resolved_more_than_once(change: object, expected: str) -> None:
    h = clean()
    change(h)  # type: ignore[operator]
    problems = resolved_at_most_once(h)
    assert any(expected in p for p in problems), problems
    broken("resolved at most once", h)


def test_a_packed_request_booked_once_per_member() -> None:
    # Issue 15, defect 15: each member booked the whole request.
    h = clean()
    h.bookings[1] = replace(h.bookings[1], cost_usd=PRICE)
    h.bookings[2] = replace(h.bookings[2], cost_usd=PRICE)
    [problem] = costs_match(h)
    assert "booked $0.002000000" in problem and "received it 1x" in problem
    broken("costs match the provider", h)


def test_a_request_paid_twice_but_booked_once() -> None:
    h = clean()
    h.requests["h-d1"] = 2
    problems = costs_match(h)
    assert problems == [
        "request h-d1 (d1/decide): booked $0.001000000, the provider received it 2x at $0.001000000"
    ]


def test_an_unknown_cost_booked_as_zero() -> None:
    h = clean()
    h.bookings[5] = replace(h.bookings[5], cost_usd=0.0)
    problems = costs_match(h)
    assert any("booked 0 (unknown)" in p for p in problems), problems
    broken("costs match the provider", h)


def test_a_cost_booked_for_a_request_never_received() -> None:
    h = clean()
    h.requests.pop("h-d1")
    h.requests_by_call.pop("d1/decide")
    problems = costs_match(h)
    assert any("received it 0x" in p for p in problems), problems
    assert any("provider never received" in p for p in problems), problems
    broken("costs match the provider", h)


def test_a_local_handler_run_booked_as_a_paid_request() -> None:
    h = clean()
    h.bookings[4] = replace(h.bookings[4], request_sha256="h-args", cost_usd=0.0001)
    assert costs_match(h) == ["m1/handler: $0.0001 booked for a local run"]
    # Free, even when the worker died in it: a handler run is not a request.
    h.bookings[4] = replace(h.bookings[4], cost_usd=0.0, status="unknown")
    assert costs_match(h) == []
    h.bookings[4] = replace(h.bookings[4], provider="faux")  # but a provider call is not free
    assert costs_match(h) == ["m1/handler: booked 0 (unknown); an unknown cost is null"]


def test_one_request_booked_under_two_providers() -> None:
    h = clean()
    h.bookings[2] = replace(h.bookings[2], provider="openrouter")
    assert any("booked under" in p for p in costs_match(h))


def test_an_unknown_row_may_book_less_never_more() -> None:
    h = clean()
    h.bookings[5] = replace(h.bookings[5], cost_usd=PRICE)  # the estimate of the lost one
    assert costs_match(h) == []
    h.bookings[5] = replace(h.bookings[5], cost_usd=5 * PRICE)
    assert len(costs_match(h)) == 1
