"""The loop pool's reserve in jobs (``worker.process.prefetch``), on kombu's own QoS object
(the one Celery's consumer keeps; its callback stands for the channel)."""

from __future__ import annotations

from kombu.common import QoS

from worker.process.prefetch import BYTES_PER_SLOT, JobPrefetch, message_cost


def _qos(count: int) -> tuple[QoS, list[int]]:
    applied: list[int] = []
    qos = QoS(lambda prefetch_count: applied.append(prefetch_count), count)
    qos.update()
    return qos, applied


def test_a_message_costs_its_jobs_or_its_bytes() -> None:
    assert message_cost(1, 300) == 1
    assert message_cost(32, 10_000) == 32
    assert message_cost(1, 40 * 1024 * 1024) == 40 * 1024 * 1024 // BYTES_PER_SLOT
    assert message_cost(0, 0) == 1


def test_what_a_message_took_comes_back_when_it_is_done() -> None:
    qos, applied = _qos(512)
    prefetch = JobPrefetch()
    prefetch.attach(qos)
    held = [prefetch.take(32) for _ in range(3)]
    assert qos.value == 512 - 3 * 31
    qos.update()
    assert applied[-1] == 419  # what the consumer's loop applies to the channel
    for one in held:
        prefetch.give(*one)
    assert qos.value == 512


def test_never_below_one_and_only_what_was_taken_comes_back() -> None:
    qos, _ = _qos(40)
    prefetch = JobPrefetch()
    prefetch.attach(qos)
    first = prefetch.take(32)
    second = prefetch.take(32)  # only 8 slots were left to take, down to one
    assert qos.value == 1 and first[1] == 31 and second[1] == 8
    prefetch.give(*second)
    assert qos.value == 9
    prefetch.give(*first)
    assert qos.value == 40


def test_single_jobs_take_nothing_from_celerys_own_count() -> None:
    qos, _ = _qos(512)
    prefetch = JobPrefetch()
    prefetch.attach(qos)
    assert prefetch.take(1)[1] == 0 and qos.value == 512


def test_a_new_qos_after_a_reconnect_is_never_raised_by_the_old_messages() -> None:
    old, _ = _qos(512)
    prefetch = JobPrefetch()
    prefetch.attach(old)
    held = prefetch.take(32)
    new, _ = _qos(512)
    prefetch.attach(new)
    prefetch.give(*held)
    assert new.value == 512


def test_retries_waiting_for_their_eta_meanwhile_take_nothing_back() -> None:
    # Celery raises the count for each message held until its eta, and lowers it after.
    qos, _ = _qos(512)
    prefetch = JobPrefetch()
    prefetch.attach(qos)
    held = prefetch.take(32)
    qos.increment_eventually(2)
    prefetch.give(*held)
    qos.decrement_eventually(2)
    assert qos.value == 512
