"""A deadlock (40P01) or a serialization failure (40001) is a conflict between transactions,
not an outage: it is named as such, the aborted transaction is run again a few times after a
short jittered pause, and only a conflict that outlasts those tries is handled as an outage
is (a ``LedgerConflict`` is a ``LedgerUnavailable``). Other errors are translated as before.

The PostgreSQL tests make the server itself raise the SQLSTATE at the statement the group
commit (or a ``Ledger`` method) runs, so the transaction is really aborted server-side."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from structlog.testing import capture_logs

from tests.ledger.conftest import judgment_claim, open_jobs
from worker.ledger import Claim, Ledger, LedgerConflict, LedgerUnavailable, conflicts
from worker.ledger.batch import GroupCommit
from worker.ledger.engine import translate_error
from worker.ledger.errors import OverServerLimit
from worker.process.batching import Item
from worker.tasks import RETRIED

URL = "postgresql+psycopg://u:pw@db/ledger"
CONFLICTS = {"40P01": "deadlock_detected", "40001": "serialization_failure"}


def wrapped(sqlstate: str, wrapper: type[exc.DBAPIError] | None = None) -> exc.DBAPIError:
    orig = psycopg.errors.lookup(sqlstate)("the server's own words\nDETAIL: more")
    if wrapper is not None:
        return wrapper("UPDATE", None, orig)
    return exc.DBAPIError.instance("UPDATE", None, orig, psycopg.Error)


# --- what a conflict is -------------------------------------------------------------------


@pytest.mark.parametrize("sqlstate", sorted(CONFLICTS))
@pytest.mark.parametrize("wrapper", [None, exc.OperationalError, exc.InternalError])
def test_a_deadlock_or_serialization_failure_is_a_conflict_not_an_outage(
    sqlstate: str, wrapper: type[exc.DBAPIError] | None
) -> None:
    translated = translate_error(wrapped(sqlstate, wrapper), URL)
    assert isinstance(translated, LedgerConflict)
    assert translated.sqlstate == sqlstate
    said = str(translated)
    assert "conflict" in said and f"SQLSTATE {sqlstate} {CONFLICTS[sqlstate]}" in said
    assert "unavailable" not in said
    assert "u:***@db" in said and "pw" not in said and "\n" not in said
    # One that outlasts its retries is what every conflict was before: waited out as an outage.
    assert isinstance(translated, LedgerUnavailable) and isinstance(translated, RETRIED)


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("40002", LedgerUnavailable),  # an integrity violation at commit: not a conflict
        ("40003", LedgerUnavailable),  # statement completion unknown: not a conflict
        ("08006", LedgerUnavailable),
        ("57P01", LedgerUnavailable),
        ("55P03", LedgerUnavailable),
        ("54001", OverServerLimit),
    ],
)
def test_other_errors_are_translated_as_before(sqlstate: str, expected: type) -> None:
    translated = translate_error(wrapped(sqlstate), URL)
    assert type(translated) is expected
    assert not isinstance(translated, LedgerConflict)


def test_a_conflict_survives_a_pickle_whole() -> None:
    # Celery's prefork pool pickles what a task raised; the default rebuild lost sqlstate.
    again = pickle.loads(pickle.dumps(conflict_of("40001")))
    assert isinstance(again, LedgerConflict) and again.sqlstate == "40001"
    assert str(again) == str(conflict_of("40001"))


def test_a_bug_stays_a_bug() -> None:
    assert translate_error(wrapped("23505", exc.IntegrityError), URL) is None
    assert translate_error(wrapped("42601", exc.ProgrammingError), URL) is None


# --- the retry ------------------------------------------------------------------------------


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(conflicts.time, "sleep", slept.append)
    return slept


def conflict_of(sqlstate: str = "40P01") -> LedgerConflict:
    translated = translate_error(wrapped(sqlstate), URL)
    assert isinstance(translated, LedgerConflict)
    return translated


def test_a_conflict_is_run_again_after_a_short_jittered_pause(pauses: list[float]) -> None:
    tries = iter([conflict_of("40P01"), conflict_of("40001"), None])

    def attempt() -> str:
        error = next(tries)
        if error is not None:
            raise error
        return "committed"

    with capture_logs() as logs:
        assert conflicts.retry_conflicts(attempt, operation="group commit") == "committed"
    assert len(pauses) == 2 and all(0 < p <= conflicts.CONFLICT_PAUSE_MAX_S for p in pauses)
    assert [(e["event"], e["sqlstate"], e["retrying"]) for e in logs] == [
        ("ledger.conflict", "40P01", True),
        ("ledger.conflict", "40001", True),
    ]
    assert all(e["log_level"] == "warning" and e["operation"] == "group commit" for e in logs)
    assert [e["attempt"] for e in logs] == [1, 2]


def conflicts_counted(sqlstate: str, retried: str) -> float:
    sample = REGISTRY.get_sample_value(
        "decisions_ledger_conflicts_total", {"sqlstate": sqlstate, "retried": retried}
    )
    return sample or 0.0


def test_every_aborted_try_is_counted_by_sqlstate_and_whether_it_was_run_again(
    pauses: list[float],
) -> None:
    # An operator sees conflicts on the metrics endpoint, not only in WARNING lines: a rate
    # of them says two workers' batches keep crossing; one given up says a job waits.
    before = {
        (s, r): conflicts_counted(s, r) for s in ("40P01", "40001") for r in ("yes", "no")
    }
    tries = iter([conflict_of("40P01"), conflict_of("40001"), None])

    def attempt() -> None:
        error = next(tries)
        if error is not None:
            raise error

    conflicts.retry_conflicts(attempt, operation="group commit")

    def always() -> None:
        raise conflict_of("40P01")

    with pytest.raises(LedgerConflict):
        conflicts.retry_conflicts(always, operation="claim")
    after = {key: conflicts_counted(*key) - value for key, value in before.items()}
    assert after == {
        ("40P01", "yes"): 1 + conflicts.CONFLICT_TRIES - 1,
        ("40P01", "no"): 1,
        ("40001", "yes"): 1,
        ("40001", "no"): 0,
    }


def test_the_pauses_are_jittered() -> None:
    assert len({conflicts.conflict_pause(1) for _ in range(20)}) > 1


def test_a_conflict_that_outlasts_its_tries_is_raised_as_one_that_persisted(
    pauses: list[float],
) -> None:
    calls = 0

    def attempt() -> None:
        nonlocal calls
        calls += 1
        raise conflict_of()

    with capture_logs() as logs, pytest.raises(LedgerConflict) as raised:
        conflicts.retry_conflicts(attempt, operation="claim")
    assert calls == conflicts.CONFLICT_TRIES and len(pauses) == calls - 1
    said = str(raised.value)
    assert "SQLSTATE 40P01" in said and f"{calls} tries" in said
    assert isinstance(raised.value, LedgerUnavailable)  # then handled as an outage, as before
    assert logs[-1]["retrying"] is False and logs[-1]["attempt"] == calls


def test_an_outage_or_a_refusal_is_not_retried_here(pauses: list[float]) -> None:
    for error in (LedgerUnavailable("down"), ValueError("refused")):
        calls = 0

        def attempt(error: Exception = error) -> None:
            nonlocal calls
            calls += 1
            raise error

        with pytest.raises(type(error)):
            conflicts.retry_conflicts(attempt, operation="claim")
        assert calls == 1
    assert pauses == []


# --- on PostgreSQL: the server raises it ------------------------------------------------------


def raise_on_server(
    engine: Engine, sqlstate: str, times: int, marks: tuple[str, ...] = ("FROM jobs", "FOR UPDATE")
) -> list[str]:
    """Have the server raise ``sqlstate`` (aborting the transaction) in place of the first
    ``times`` statements holding every one of ``marks`` (by default those that lock a job's
    row for a claim); the statements it failed."""
    failed: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _raise(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if len(failed) < times and all(mark in statement for mark in marks):
            failed.append(statement)
            cursor.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END $$"
            )

    return failed


@pytest.fixture
def pg_ledger(pg_url: Callable[..., str]) -> Iterator[Ledger]:
    ledger = Ledger(pg_url())
    try:
        ledger.migrate()
        open_jobs(ledger, "j1", "j2", "j3")
        yield ledger
    finally:
        ledger.dispose()


def batch_of_claims(group: GroupCommit, job_ids: list[str]) -> list[Item]:
    loop = asyncio.new_event_loop()
    try:
        writes = [Item("claim", judgment_claim(j), loop, loop.create_future()) for j in job_ids]
        group.handle(writes)
    finally:
        loop.close()
    return writes


@pytest.mark.integration
@pytest.mark.parametrize("sqlstate", sorted(CONFLICTS))
def test_a_batch_aborted_for_a_conflict_is_committed_on_its_next_try(
    pg_ledger: Ledger, sqlstate: str, pauses: list[float]
) -> None:
    failed = raise_on_server(pg_ledger.engine, sqlstate, times=2)
    with capture_logs() as logs:
        writes = batch_of_claims(GroupCommit(pg_ledger), ["j1", "j2", "j3"])
    assert len(failed) == 2 and len(pauses) == 2
    assert [w.error for w in writes] == [None, None, None]
    assert all(isinstance(w.result, Claim) and w.result.fresh for w in writes)
    for job_id in ("j1", "j2", "j3"):
        stored = pg_ledger.get_call(job_id, "decide")
        assert stored is not None and stored.claims == 1
    assert [(e["sqlstate"], e["retrying"]) for e in logs] == [(sqlstate, True)] * 2


@pytest.mark.integration
def test_a_batch_whose_conflict_persists_fails_as_an_outage_did_with_nothing_claimed(
    pg_ledger: Ledger, pauses: list[float]
) -> None:
    raise_on_server(pg_ledger.engine, "40P01", times=1000)
    with capture_logs() as logs:
        writes = batch_of_claims(GroupCommit(pg_ledger), ["j1", "j2"])
    assert all(isinstance(w.error, LedgerConflict) for w in writes)
    assert all(isinstance(w.error, LedgerUnavailable) for w in writes)
    assert len(logs) == conflicts.CONFLICT_TRIES and logs[-1]["retrying"] is False
    assert pg_ledger.get_call("j1", "decide") is None
    assert pg_ledger.get_call("j2", "decide") is None


@pytest.mark.integration
def test_a_single_claim_aborted_for_a_conflict_is_committed_on_its_next_try(
    pg_ledger: Ledger, pauses: list[float]
) -> None:
    # The group commit runs a batch's writes alone after a statement of one failed; a
    # Ledger method's own transaction is retried the same way.
    raise_on_server(pg_ledger.engine, "40P01", times=1)
    with capture_logs() as logs:
        got = pg_ledger.claim(**judgment_claim("j1"))
    assert got.fresh and got.call.claims == 1
    assert [(e["event"], e["operation"]) for e in logs] == [("ledger.conflict", "claim")]


@pytest.mark.integration
def test_setting_a_budget_aborted_for_a_conflict_is_committed_on_its_next_try(
    pg_ledger: Ledger, pauses: list[float]
) -> None:
    """Found by an attack: ``set_budget`` and ``reopen_exhausted`` (``decisions budget set``
    and ``resume``) were not run again on a conflict, and the command failed."""
    failed = raise_on_server(pg_ledger.engine, "40P01", times=1, marks=("budgets",))
    with capture_logs() as logs:
        status = pg_ledger.set_budget("b1", 2.5, wait_s=0)
    assert len(failed) == 1 and status.limit_usd == 2.5
    conflicts_said = [e for e in logs if e["event"] == "ledger.conflict"]
    assert [e["operation"] for e in conflicts_said] == ["set_budget"]
