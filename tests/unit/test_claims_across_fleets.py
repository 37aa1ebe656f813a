"""A live claim is judged by the bounds its holder was given, not by the reader's settings.

Two fleets share one ledger through every rolling deploy that changes
``DECISIONS_LEASE_MARGIN_S`` or ``DECISIONS_DEADLINE_CEILING_S``. An attack found a delivery
that met a live duplicate's claim judging that claim's lease by its own, smaller settings:
further off than it could have made it, so "a lease no worker was given"; it booked the live,
paid call ``unknown``, escalated the job ``decision_interrupted`` while the request was in
flight, and the holder's answer was thrown away (six live calls lost so).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from shared.setting_types import MAX_SECONDS
from shared.settings import Settings
from worker.delivery import Delivery
from worker.delivery.leased import MIN_EXTENSION_S
from worker.delivery.sinks import MemorySink
from worker.kinds.decide import DECIDE_STEP
from worker.ledger import CallOutcome, CallRow, Claim, ClaimLost, Ledger
from worker.ledger.leases import MAX_REACH_S, trusted_reach
from worker.providers import ProviderRegistry

#: How long the holder's request is in flight before its answer comes back.
IN_FLIGHT_S = 2.5
#: A date a hand-edited row may hold (the largest a column takes).
FAR = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)


class Fleet:
    """One fleet's worker: its own settings and its own Ledger object on the shared ledger."""

    def __init__(self, url: str, **over: Any) -> None:
        self.settings = Settings(_env_file=None, ledger_url=url, faux_url=None, **over)
        self.ledger = Ledger.from_settings(self.settings)
        self.delivery = Delivery(
            settings=self.settings,
            ledger=self.ledger,
            providers=ProviderRegistry.from_settings(self.settings),
            sink=MemorySink(),
        )


@dataclass(frozen=True)
class Scene:
    """A job opened on the shared ledger, a fleet that claims its call and one that meets it."""

    holder: Fleet
    reader: Fleet
    job_id: str
    deadline: datetime

    async def claim(self) -> CallRow:
        claim = await self.holder.delivery.claim(
            self.job_id, DECIDE_STEP, provider="faux", model="faux-1", request_sha256="x",
            deadline=self.deadline,
        )  # fmt: skip
        assert isinstance(claim, Claim) and claim.fresh
        return claim.call

    async def answer_later(self) -> CallRow:
        """The holder's request, in flight for ``IN_FLIGHT_S``, then its answer recorded."""
        await asyncio.sleep(IN_FLIGHT_S)
        outcome = CallOutcome(
            step=DECIDE_STEP, status="answered", cost_usd=0.001, cost_basis="reported",
            outcome_json='{"q": true}',
        )  # fmt: skip
        try:
            return await self.holder.delivery.record(self.job_id, outcome)
        except ClaimLost as lost:  # booked meanwhile: the answer is thrown away
            return lost.call

    async def awaited(self, call: CallRow) -> CallRow:
        settled = await self.reader.delivery.await_claim(self.job_id, DECIDE_STEP, call)
        assert isinstance(settled, CallRow), settled
        return settled

    def held_and_awaited(self, *alongside: Callable[[], Coroutine[Any, Any, Any]]) -> CallRow:
        """The holder claims and answers (``alongside`` runs too); what the reader, meeting
        its claim, settles it as."""

        async def both() -> CallRow:
            call = await self.claim()
            settled, *_ = await asyncio.gather(
                self.awaited(call), self.answer_later(), *(run() for run in alongside)
            )
            assert isinstance(settled, CallRow)
            return settled

        return asyncio.run(asyncio.wait_for(both(), 30))


SceneOf = Callable[..., Scene]


@pytest.fixture
def scene_of(ledger_url: str) -> Iterator[SceneOf]:
    """``scene_of(job_id, holder={...}, reader={...}, deadline_s=...)``: each fleet's own
    settings, and the job's deadline that far off by the ledger's clock."""
    made: list[Fleet] = []
    first = Ledger(ledger_url)
    first.migrate()
    first.dispose()

    def make(
        job_id: str, *, holder: dict[str, Any], reader: dict[str, Any], deadline_s: float
    ) -> Scene:
        fleets = Fleet(ledger_url, **holder), Fleet(ledger_url, **reader)
        made.extend(fleets)
        deadline = fleets[0].ledger.now() + timedelta(seconds=deadline_s)
        fleets[0].ledger.open_job(
            job_id=job_id, kind="decide", batch=None, reply_to="r", fingerprint="fp",
            deadline=deadline, job_json="{}",
        )  # fmt: skip
        return Scene(*fleets, job_id, deadline)

    yield make
    for fleet in made:
        fleet.ledger.dispose()


def test_a_claim_under_a_larger_margin_is_waited_for(scene_of: SceneOf) -> None:
    scene = scene_of(
        "margin", holder={"lease_margin_s": 20.0}, reader={"lease_margin_s": 0.0}, deadline_s=0.5
    )

    settled = scene.held_and_awaited()

    # Booked ``unknown`` (``lease_expired``) before: the holder's lease, 20 s past the
    # deadline, was further off than the reader's own margin and renewal step allow.
    assert (settled.status, settled.error_code) == ("answered", None)
    stored = scene.reader.ledger.get_call("margin", DECIDE_STEP)
    assert stored is not None and stored.outcome_json == '{"q": true}'


def test_a_claim_under_a_larger_ceiling_is_waited_for(scene_of: SceneOf) -> None:
    scene = scene_of(
        "ceiling",
        holder={"deadline_ceiling_s": 600.0, "lease_margin_s": 0.0},
        reader={"deadline_ceiling_s": 0.5, "default_timeout_s": 0.5, "lease_margin_s": 0.0},
        deadline_s=30,  # within the holder's ceiling, far past the reader's
    )

    settled = scene.held_and_awaited()

    assert (settled.status, settled.error_code) == ("answered", None)


@pytest.mark.parametrize("margin", [20.0, 1.0], ids=["larger-margin", "step-past-the-claim"])
def test_a_renewed_claim_is_waited_for(scene_of: SceneOf, margin: float) -> None:
    # A menu handler's claim, renewed by its holder to its own step ahead (its margin, or
    # MIN_EXTENSION_S if that is more: then further than its claim put it), past the
    # job's deadline (worker.delivery.leased).
    scene = scene_of(
        "renewed", holder={"lease_margin_s": margin}, reader={"lease_margin_s": 0.0},
        deadline_s=0.2,
    )  # fmt: skip
    step = max(margin, MIN_EXTENSION_S)

    async def renewing() -> None:
        for _ in range(4):
            await asyncio.sleep(0.5)
            assert await asyncio.to_thread(
                scene.holder.ledger.renew_lease, job_id="renewed", step=DECIDE_STEP, extend_s=step
            )

    settled = scene.held_and_awaited(renewing)

    assert (settled.status, settled.error_code) == ("answered", None)


def test_a_claim_written_before_the_reach_was_kept_is_judged_as_before(
    scene_of: SceneOf,
) -> None:
    # Revision 0007 added the reach; a claim older than that says nothing of its holder's
    # settings, so the reader's own bound it, as they did.
    scene = scene_of(
        "old", holder={"lease_margin_s": 20.0}, reader={"lease_margin_s": 0.0}, deadline_s=0.5
    )

    async def meet() -> CallRow:
        await scene.claim()
        with scene.holder.ledger.engine.begin() as conn:
            conn.execute(sa.text("UPDATE calls SET lease_reach_s = NULL"))
        call = scene.reader.ledger.get_call("old", DECIDE_STEP)
        assert call is not None and call.lease_reach_s is None
        return await scene.awaited(call)

    settled = asyncio.run(asyncio.wait_for(meet(), 30))

    assert (settled.status, settled.error_code) == ("unknown", "lease_expired")


@pytest.mark.parametrize(
    "reach", [1e300, float("inf"), float("nan")], ids=["huge", "infinite", "nan"]
)
def test_a_far_lease_under_a_damaged_reach_is_not_waited_for(
    scene_of: SceneOf, reach: float
) -> None:
    scene = scene_of("damaged", holder={}, reader={"lease_margin_s": 0.0}, deadline_s=0.5)
    # Five years off, within the cap on a reach (an attack's row: waited for while a reach
    # of NaN or past the cap was taken as the cap); SQLite stores a NaN as NULL.
    far = (datetime.now(UTC) + timedelta(days=5 * 365)).replace(microsecond=0)

    async def meet() -> CallRow:
        await scene.claim()
        with scene.holder.ledger.engine.begin() as conn:  # by hand, as a damaged row holds
            conn.execute(
                sa.text("UPDATE calls SET lease_expires = :l, lease_reach_s = :r"),
                {"l": far.replace(tzinfo=None), "r": reach},
            )
        call = scene.reader.ledger.get_call("damaged", DECIDE_STEP)
        assert call is not None and call.lease_expires == far
        return await scene.awaited(call)

    settled = asyncio.run(asyncio.wait_for(meet(), 10))

    assert (settled.status, settled.error_code) == ("unknown", "lease_expired")


@pytest.mark.parametrize(
    ("stored", "trusted"),
    [(30.0, 30.0), (-5.0, 0.0), (MAX_REACH_S, MAX_REACH_S), (1e300, None),
     (float("inf"), None), (float("nan"), None), (float("-inf"), 0.0)],
    ids=["kept", "negative", "at-the-cap", "huge", "infinite", "nan", "minus-infinite"],
)  # fmt: skip
def test_a_stored_reach_is_trusted_only_as_far_as_settings_reach(
    stored: float, trusted: float | None
) -> None:
    # NaN reaches a PostgreSQL row (SQLite stores it as NULL); one no settings can give is
    # not trusted at all (None: judged as a row without a reach), not taken as the cap.
    assert trusted_reach(stored) == trusted
    assert MAX_REACH_S == 2 * MAX_SECONDS
