"""A checker over the whole history of a fault run, not job by job.

A ``History`` is everything observable once a run has settled: what the faux provider
received (by request digest and by call key), which handler runs happened (by job), every
entry on every reply stream of the run, what the ledger booked for each call, what each
request cost at the provider, and what each reviewer was told when resolving. ``check_history``
asserts the product's promises over all of it at once:

- ``requests_at_most_once``: no request reached the provider twice: no call key twice, and
  no body digest (what the ledger stores as ``request_sha256``) more often than the ledger
  holds distinct requests with that body;
- ``handler_runs_at_most_once``: no handler ran twice for a job;
- ``one_terminal_per_job``: every submitted job has exactly one terminal entry on its own
  stream, and none on another stream of the run (a raw duplicate entry counts: a consumer
  that does not deduplicate would act twice);
- ``resolved_at_most_once``: an escalated job is resolved at most once, only when it did
  escalate, and a reviewer told "resolved" is always the one whose answer was published;
- ``costs_match``: for every request, what the ledger booked across its rows (a packed
  request's members hold shares) equals the provider's count times its price, where the price
  is what the provider reported for one such request; a cost is never booked as 0 (unknown is
  null).

Each property is a plain function returning the problems it found, so each can be shown
failing on a hand-made history (tests/unit/test_history_checker.py). ``collect`` builds a
``History`` from a fleet's real servers.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import httpx
import redis

from shared.streams import read_stream
from worker.ledger import CallRow, Ledger

__all__ = [
    "Booking",
    "Entry",
    "History",
    "HistoryFigures",
    "ResolveAttempt",
    "check_history",
    "collect",
    "costs_match",
    "handler_runs_at_most_once",
    "one_terminal_per_job",
    "price_of_requests",
    "requests_at_most_once",
    "resolved_at_most_once",
]

TERMINAL = frozenset({"result", "escalation", "rejected"})
RESOLUTION = "resolution"
#: Ledger "providers" of local runs (handlers, tools): never a paid request, so free or null.
LOCAL_PROVIDERS = frozenset({"handler", "tool", "local"})
#: Pack shares are rounded (``worker.ledger``); sums of shares match a price within this.
_COST_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Entry:
    """One entry of a reply stream: its stream, job, type and message (JSON text)."""

    stream: str
    job_id: str
    type: str
    message: str


@dataclass(frozen=True)
class Booking:
    """One ledger call row, as far as costs go."""

    job_id: str
    step: str
    provider: str
    status: str
    request_sha256: str | None
    cost_usd: float | None
    pack_id: str | None = None


@dataclass(frozen=True)
class ResolveAttempt:
    """What one reviewer was told: ``resolved`` True if ``resolve`` returned normally."""

    job_id: str
    reviewer: str
    resolved: bool


@dataclass
class History:
    #: Job id -> the reply stream it was submitted with (its own stream).
    submitted: dict[str, str]
    #: The faux's counts by request body digest and by ``X-Decisions-Call`` key.
    requests: dict[str, int] = field(default_factory=dict)
    requests_by_call: dict[str, int] = field(default_factory=dict)
    #: One (job id, handler name) per handler run that happened.
    handler_runs: list[tuple[str, str]] = field(default_factory=list)
    #: Every entry on every reply stream of the run (terminal and resolutions).
    entries: list[Entry] = field(default_factory=list)
    bookings: list[Booking] = field(default_factory=list)
    #: Request digest -> what one such request costs at the provider (None: not reported).
    prices: dict[str, float | None] = field(default_factory=dict)
    resolve_attempts: list[ResolveAttempt] = field(default_factory=list)


@dataclass
class HistoryFigures:
    jobs_by_kind: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    request_duplicates: int = 0
    handler_runs: int = 0
    terminal_messages: int = 0
    terminal_by_type: dict[str, int] = field(default_factory=dict)
    escalated_by_reason: dict[str, int] = field(default_factory=dict)
    resolutions: int = 0
    resolve_refused: int = 0
    booked_by_provider: dict[str, float] = field(default_factory=dict)
    #: Calls whose outcome is unknown, booked null (a possibly paid request, cost unknown).
    unknown_cost_rows: int = 0
    #: Requests whose price the provider reported: those ``costs_match`` compares exactly.
    priced_requests: int = 0

    def line(self) -> str:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.jobs_by_kind.items()))
        types = ", ".join(f"{k}: {v}" for k, v in sorted(self.terminal_by_type.items()))
        booked = ", ".join(f"{k}: ${v:.6f}" for k, v in sorted(self.booked_by_provider.items()))
        return (
            f"jobs={{{kinds}}} requests={self.requests} "
            f"request_duplicates={self.request_duplicates} handler_runs={self.handler_runs} "
            f"terminal={self.terminal_messages} {{{types}}} "
            f"escalated={self.escalated_by_reason} resolutions={self.resolutions} "
            f"resolve_refused={self.resolve_refused} booked={{{booked}}} "
            f"unknown_cost_rows={self.unknown_cost_rows} priced_requests={self.priced_requests}"
        )


# --- the properties ---------------------------------------------------------------------
def requests_at_most_once(history: History) -> list[str]:
    """No call key twice; no body digest more often than the ledger holds distinct requests
    with that body (a pack's members are one request; two calls of one job may carry the
    same body by design, as a high-stakes ``verify`` asks one checker twice)."""
    calls: dict[str, list[str]] = defaultdict(list)
    for b in history.bookings:
        if b.request_sha256 is not None:
            calls[b.request_sha256].append(f"{b.job_id}/{b.step} {b.status}")
    distinct = _distinct_requests(history)
    problems = [
        f"request {digest[:12]} reached the provider {n}x"
        + (f" (ledger: {', '.join(sorted(calls[digest]))})" if calls.get(digest) else "")
        for digest, n in sorted(history.requests.items())
        if n > max(1, len(distinct.get(digest, ())))
    ]
    problems += [
        f"call {key} reached the provider {n}x"
        for key, n in sorted(history.requests_by_call.items())
        if n > 1
    ]
    return problems


def _distinct_requests(history: History) -> dict[str, set[str]]:
    """Per body digest, the distinct requests the ledger holds with it (a pack is one)."""
    distinct: dict[str, set[str]] = defaultdict(set)
    for b in history.bookings:
        if b.request_sha256 is not None:
            distinct[b.request_sha256].add(
                f"pack:{b.pack_id}/{b.step}" if b.pack_id else f"{b.job_id}/{b.step}"
            )
    return distinct


def handler_runs_at_most_once(history: History) -> list[str]:
    runs = Counter(history.handler_runs)
    return [
        f"{job_id}: handler {name} ran {n}x" for (job_id, name), n in sorted(runs.items()) if n > 1
    ]


def one_terminal_per_job(history: History) -> list[str]:
    problems: list[str] = []
    terminal: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for entry in history.entries:
        if entry.type in TERMINAL:
            terminal[(entry.job_id, entry.stream)].append(entry)
    for job_id, stream in sorted(history.submitted.items()):
        found = terminal.get((job_id, stream), [])
        if not found:
            problems.append(f"{job_id}: no terminal message on {stream} (lost)")
        elif len(found) > 1:
            types = [e.type for e in found]
            problems.append(f"{job_id}: {len(found)} terminal messages on {stream} {types}")
    for (job_id, stream), found in sorted(terminal.items()):
        if history.submitted.get(job_id) != stream:
            problems.append(
                f"{job_id}: {len(found)} terminal message(s) on {stream}, "
                f"not its own stream ({history.submitted.get(job_id)})"
            )
    return problems


def resolved_at_most_once(history: History) -> list[str]:
    problems: list[str] = []
    published: dict[str, list[Entry]] = defaultdict(list)
    escalated: set[str] = set()
    for entry in history.entries:
        if entry.type == RESOLUTION:
            published[entry.job_id].append(entry)
        elif entry.type == "escalation":
            escalated.add(entry.job_id)
    for job_id, found in sorted(published.items()):
        if len(found) > 1:
            problems.append(f"{job_id}: resolved {len(found)}x")
        if job_id not in escalated:
            problems.append(f"{job_id}: resolved but never escalated")
    told: Counter[str] = Counter(a.job_id for a in history.resolve_attempts if a.resolved)
    for job_id, n in sorted(told.items()):
        if n > 1:
            problems.append(f"{job_id}: {n} reviewers were told they resolved it")
        if n != len(published.get(job_id, [])):
            problems.append(
                f"{job_id}: {n} reviewer(s) told resolved, "
                f"{len(published.get(job_id, []))} resolution(s) published"
            )
    return problems


def costs_match(history: History) -> list[str]:
    problems: list[str] = []
    by_request: dict[str, list[Booking]] = defaultdict(list)
    for booking in history.bookings:
        who = f"{booking.job_id}/{booking.step}"
        received = history.requests.get(booking.request_sha256 or "", 0)
        # 0 is "free": right for a local handler run, never for a request that may be paid.
        local = booking.provider in LOCAL_PROVIDERS
        paid = received > 0 or (booking.status == "unknown" and not local)
        if local and booking.cost_usd:
            problems.append(f"{who}: ${booking.cost_usd} booked for a local run")
            continue
        if booking.cost_usd is not None and booking.cost_usd == 0 and paid:
            problems.append(f"{who}: booked 0 ({booking.status}); an unknown cost is null")
        if booking.cost_usd and not received and booking.status != "unknown":
            problems.append(
                f"{who}: ${booking.cost_usd} booked ({booking.status}) for a request the "
                "provider never received"
            )
        if booking.cost_usd is not None and (math.isnan(booking.cost_usd) or booking.cost_usd < 0):
            problems.append(f"{who}: booked {booking.cost_usd}")
        if booking.request_sha256 is None:
            continue
        by_request[booking.request_sha256].append(booking)
    for digest, rows in sorted(by_request.items()):
        providers = {b.provider for b in rows}
        if len(providers) > 1:
            problems.append(f"request {digest[:12]}: booked under {sorted(providers)}")
        price = history.prices.get(digest)
        if price is None:
            continue  # the provider never reported one: only "never 0" can be checked
        count = history.requests.get(digest, 0)
        booked = sum(b.cost_usd for b in rows if b.cost_usd is not None)
        if any(b.cost_usd is None for b in rows) and booked <= count * price + _COST_TOLERANCE:
            continue  # some of it booked unknown (null): less is honest, more is not
        if abs(booked - count * price) > _COST_TOLERANCE + 1e-6 * count * price:
            members = ", ".join(sorted(f"{b.job_id}/{b.step}" for b in rows))
            problems.append(
                f"request {digest[:12]} ({members}): booked ${booked:.9f}, the provider "
                f"received it {count}x at ${price:.9f}"
            )
    return problems


PROPERTIES: dict[str, Callable[[History], list[str]]] = {
    "requests at most once": requests_at_most_once,
    "handler runs at most once": handler_runs_at_most_once,
    "one terminal message per job": one_terminal_per_job,
    "resolved at most once": resolved_at_most_once,
    "costs match the provider": costs_match,
}


def figures_of(history: History, kinds: Mapping[str, str] | None = None) -> HistoryFigures:
    figures = HistoryFigures()
    figures.jobs_by_kind = dict(Counter((kinds or {}).get(j, "?") for j in history.submitted))
    figures.requests = sum(history.requests.values())
    distinct = _distinct_requests(history)
    figures.request_duplicates = sum(
        max(0, n - max(1, len(distinct.get(d, ())))) for d, n in history.requests.items()
    )
    figures.request_duplicates += sum(n - 1 for n in history.requests_by_call.values() if n > 1)
    figures.handler_runs = len(history.handler_runs)
    terminal = [e for e in history.entries if e.type in TERMINAL]
    figures.terminal_messages = len(terminal)
    figures.terminal_by_type = dict(Counter(e.type for e in terminal))
    figures.escalated_by_reason = dict(
        Counter(_reason(e.message) for e in terminal if e.type == "escalation")
    )
    figures.resolutions = sum(1 for e in history.entries if e.type == RESOLUTION)
    figures.resolve_refused = sum(1 for a in history.resolve_attempts if not a.resolved)
    booked: dict[str, float] = defaultdict(float)
    for b in history.bookings:
        if b.cost_usd is not None:
            booked[b.provider] += b.cost_usd
        elif b.status == "unknown":
            figures.unknown_cost_rows += 1
    figures.booked_by_provider = dict(booked)
    figures.priced_requests = sum(1 for price in history.prices.values() if price is not None)
    return figures


def _reason(message: str) -> str:
    try:
        return str(json.loads(message).get("reason"))
    except (ValueError, AttributeError):
        return "?"


def check_history(
    history: History,
    kinds: Mapping[str, str] | None = None,
    *,
    skip: Iterable[str] = (),
) -> HistoryFigures:
    """Every property over ``history`` (but those named in ``skip``); ``AssertionError``
    listing every problem, else the figures."""
    skipped = set(skip)
    problems: list[str] = []
    for name, prop in PROPERTIES.items():
        if name not in skipped:
            problems += [f"[{name}] {p}" for p in prop(history)]
    figures = figures_of(history, kinds)
    if problems:
        shown = "\n  ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise AssertionError(
            f"{len(problems)} broken promise(s); {figures.line()}\n  {shown}{more}"
        )
    return figures


# --- collecting a real run's history -------------------------------------------------------
def price_of_requests(rows: Iterable[CallRow]) -> dict[str, float | None]:
    """What the provider reported one request cost, by digest: a packed request's whole cost
    (``request_cost_usd`` of a member's receipt), else an answered call's reported cost."""
    prices: dict[str, float | None] = {}
    for row in rows:
        if row.request_sha256 is None or row.receipt_json is None:
            continue
        receipt = json.loads(row.receipt_json)
        packed = receipt.get("packed") or {}
        if packed.get("request_cost_usd") is not None:
            prices[row.request_sha256] = float(packed["request_cost_usd"])
        elif row.status == "answered" and row.cost_basis == "reported" and not row.pack_id:
            prices.setdefault(row.request_sha256, row.cost_usd)
    return prices


def collect(
    submitted: Mapping[str, str],
    *,
    r: redis.Redis,
    faux_url: str,
    ledger_url: str,
    handler_runs: Iterable[tuple[str, str]],
    resolve_attempts: Iterable[ResolveAttempt] = (),
) -> History:
    """The history of a run whose servers are still up."""
    requests = dict(httpx.get(f"{faux_url}/_faux/requests", timeout=10).json())
    by_call = dict(httpx.get(f"{faux_url}/_faux/calls", timeout=10).json())
    entries = [
        Entry(stream, e.job_id, e.type, e.message)
        for stream in sorted(set(submitted.values()))
        for e in read_stream(r, stream)
    ]
    rows: list[CallRow] = []
    ledger = Ledger(ledger_url)
    try:
        for job_id in submitted:
            rows.extend(ledger.calls(job_id))
    finally:
        ledger.dispose()
    bookings = [
        Booking(c.job_id, c.step, c.provider, c.status, c.request_sha256, c.cost_usd, c.pack_id)
        for c in rows
    ]
    return History(
        submitted=dict(submitted),
        requests=requests,
        requests_by_call=by_call,
        handler_runs=list(handler_runs),
        entries=entries,
        bookings=bookings,
        prices=price_of_requests(rows),
        resolve_attempts=list(resolve_attempts),
    )
