"""shared.calibration with weights far apart: an audit at rate 0.01 weighs 100, at 1e-9 (the
smallest rate a job may carry) 1e9, and a hand-written or forged label may weigh MIN_WEIGHT.
The effective sample size behind every interval and the ``min_labels`` guard must never
exceed the labels it comes from, nor be erased by one light label (found by an attack: the
linearised size ``p(1-p)/v`` made 134.7 labels, and a threshold, of 3, and 0 of 41)."""

from __future__ import annotations

import random

import pytest

from shared.calibration import (
    MAX_WEIGHT,
    MIN_WEIGHT,
    Scored,
    effective_size,
    effective_text,
    report,
    weighted_share,
    wilson,
)


def test_three_labels_never_pass_the_minimum_for_a_calibrated_threshold() -> None:
    # Audit rate 0.01: two audits right, one escalation wrong. Kish's size 201^2 / 20001.
    labels = [Scored(True, confidence=0.9, probability=0.9, weight=100.0)] * 2 + [
        Scored(False, confidence=0.2, probability=0.6, weight=1.0)
    ]
    figures = report(labels, target=0.95, min_labels=30)
    assert figures.effective_labels == pytest.approx(201**2 / 20001)
    assert figures.suggestion is not None and figures.suggestion.threshold is None
    assert "too few labels: 2.0 (effective), at least 30 needed" in figures.suggestion.reason


def test_forty_audits_do_not_make_an_interval_of_certainty() -> None:
    # The 5 escalations weigh 1e-9 of the share: it is the 40 audits' all but alone.
    interval = weighted_share([(True, MAX_WEIGHT)] * 40 + [(False, 1.0)] * 5)
    audits_alone_low, _ = wilson(40, 40)
    assert interval.n == pytest.approx(40)
    assert interval.low is not None and interval.low <= audits_alone_low + 1e-9


def test_a_featherweight_label_does_not_erase_the_others() -> None:
    right = [Scored(True, confidence=0.9, probability=0.9, weight=MAX_WEIGHT)] * 40
    with_one = report([*right, Scored(False, confidence=0.9, weight=MIN_WEIGHT)], target=0.95)
    assert with_one.effective_labels == pytest.approx(40)
    assert with_one.suggestion is not None and with_one.suggestion.threshold is not None


def test_one_heavy_label_cannot_carry_a_group() -> None:
    # 100 escalations (60 right) and one audit at the heaviest weight: the share is the
    # audit's, and so is the evidence, one label's worth.
    labels = [Scored(i < 60, confidence=0.3, probability=0.7) for i in range(100)]
    figures = report([*labels, Scored(True, confidence=0.9, weight=MAX_WEIGHT)], target=0.95)
    assert figures.accuracy.value == pytest.approx(1.0)
    assert figures.effective_labels == pytest.approx(1.0, abs=1e-6)
    assert figures.suggestion is not None and figures.suggestion.threshold is None
    assert all(row.rest_accuracy.n <= 1.0 + 1e-6 for row in figures.thresholds)


def test_the_effective_size_never_exceeds_the_labels() -> None:
    rng = random.Random(11)
    for _ in range(500):
        count = rng.randint(1, 60)
        pairs = [
            (rng.random() < rng.choice([0.0, 0.5, 0.99, 1.0]), 10 ** rng.uniform(-9, 9))
            for _ in range(count)
        ]
        got = weighted_share(pairs)
        assert 1.0 - 1e-9 <= got.n <= count, (count, got.n)


def test_equal_weights_count_exactly() -> None:
    # 0.1 summed 30 times is not 3: the guard must still see 30 labels, not 29.999...
    assert effective_size([0.1] * 30) == 30
    figures = report([Scored(True, confidence=0.9, weight=0.1)] * 30, target=0.95)
    assert figures.suggestion is not None and figures.suggestion.threshold is not None


def test_a_size_just_short_of_the_minimum_does_not_read_as_enough() -> None:
    labels = [Scored(True, confidence=0.9, weight=1.0)] * 29 + [
        Scored(True, confidence=0.9, weight=1.3)
    ]
    figures = report(labels, target=0.95, min_labels=30)
    assert 29.9 < figures.effective_labels < 30
    assert figures.suggestion is not None and figures.suggestion.threshold is None
    assert "too few labels: 29.9 (effective)" in figures.suggestion.reason
    assert effective_text(figures.effective_labels) == "29.9"


def test_interval_coverage_with_audits_at_one_percent() -> None:
    """The usual design: 100 escalations (60 % right), 3000 confident answers (97 % right)
    audited at 1 % (weight 100), some 30 audits, often all right. The population's accuracy
    is covered at least about 95 % of the time (the linearised size covered it 80 %)."""
    rng = random.Random(5)
    truth = (100 * 0.6 + 3000 * 0.97) / 3100
    covered = draws = 0
    for _ in range(1000):
        pairs = [(rng.random() < 0.6, 1.0) for _ in range(100)]
        pairs += [(rng.random() < 0.97, 100.0) for _ in range(3000) if rng.random() < 0.01]
        got = weighted_share(pairs)
        assert got.low is not None and got.high is not None
        covered += got.low <= truth <= got.high
        draws += 1
    assert covered / draws >= 0.93
