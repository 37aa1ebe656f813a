"""When the loop pool hands a message back to the queue (``worker.process.deferral``)."""

from __future__ import annotations

from worker.process.deferral import MAX_SEEN, RECENT_S, Deferrals


def _filled(limit: int = 4, **kwargs: float) -> Deferrals:
    """A process serving ``fast`` lately, with ``slow``'s slots and waiting share full."""
    deferrals = Deferrals(limit, **kwargs)  # type: ignore[arg-type]
    assert deferrals.ceiling == limit + 1
    assert deferrals.admit(["fast"], now=0.0)
    deferrals.done(["fast"])
    for _ in range(deferrals.ceiling):
        assert deferrals.admit(["slow"], now=1.0)
    return deferrals


def test_a_providers_message_past_its_slots_and_share_goes_back() -> None:
    deferrals = _filled()
    assert not deferrals.admit(["slow"], now=1.0)
    assert not deferrals.admit(["slow", "slow"], now=1.0)
    assert deferrals.handed_back == 2
    # Another provider's jobs, a message of several providers, and a shutdown's are kept.
    assert deferrals.admit(["fast"], now=1.0)
    assert deferrals.admit(["slow", "fast"], now=1.0)
    assert deferrals.admit(["slow"], may_hand_back=False, now=1.0)
    # Once a slow job is done, room for one more.
    for _ in range(3):
        deferrals.done(["slow"])
    assert deferrals.admit(["slow"], now=1.0)


def test_with_one_provider_nothing_goes_back() -> None:
    deferrals = Deferrals(4)
    for _ in range(20):
        assert deferrals.admit([""], now=1.0)  # the default provider
    # Another provider served long ago does not count.
    old = Deferrals(4)
    assert old.admit(["fast"], now=0.0)
    for _ in range(20):
        assert old.admit(["slow"], now=RECENT_S + 1.0)
    assert deferrals.handed_back == old.handed_back == 0


def test_hand_backs_are_rate_bounded() -> None:
    deferrals = _filled(rate_per_s=3.0)
    verdicts = [deferrals.admit(["slow"], now=1.0) for _ in range(5)]
    assert verdicts == [False, False, False, True, True]  # past the bucket: kept
    assert not deferrals.admit(["slow"], now=1.5)  # a token and a half came back
    assert deferrals.admit(["slow"], now=1.5)
    assert deferrals.handed_back == 4


def test_made_up_provider_names_are_forgotten() -> None:
    """Found by an attack: every provider name a job gave was remembered for good."""
    deferrals = Deferrals(4)
    for n in range(5 * MAX_SEEN):
        assert deferrals.admit([f"made-up-{n}"], now=float(n) / 1000)
        deferrals.done([f"made-up-{n}"])
    assert deferrals.providers_remembered <= MAX_SEEN
    # The latest are the ones kept: a provider just served still counts as served.
    assert not deferrals.admit(["slow"] * 6, now=5 * MAX_SEEN / 1000)
