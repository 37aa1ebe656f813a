"""A worker's collector: start-up objects frozen, young collections rarer; 0 opts out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from shared.settings import Settings
from worker.process.gc_policy import tune_gc


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_tuning_freezes_what_exists_and_raises_the_first_threshold() -> None:
    gc.unfreeze()
    tune_gc(Settings(gc_first_threshold=12_345))
    assert gc.get_threshold()[0] == 12_345
    assert gc.get_freeze_count() > 1000  # modules, classes, settings: out of every walk


def test_zero_leaves_the_collector_as_python_set_it() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    tune_gc(Settings(gc_first_threshold=0))
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_negative_threshold_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="gc_first_threshold"):
        Settings(gc_first_threshold=-1)


def test_long_lived_objects_are_frozen_only_in_a_tuned_process() -> None:
    import worker.process.gc_policy as policy

    gc.unfreeze()
    policy._tuned = False
    policy.freeze_long_lived()
    assert gc.get_freeze_count() == 0  # the embedded run and tests: left alone
    tune_gc(Settings(gc_first_threshold=5_000))
    frozen = gc.get_freeze_count()
    kept = [[n] for n in range(2000)]  # a context built after start-up (tracked objects)
    policy.freeze_long_lived()
    assert gc.get_freeze_count() >= frozen + len(kept)
    policy._tuned = False
