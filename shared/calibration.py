"""Calibration statistics over reviewers' labels: pure functions, no I/O.

A *label* here is one machine answer a person also answered (``Scored``): the machine's
``confidence`` (what ``escalate_below`` is compared with), its ``probability`` of its own
answer (noul: of the value it gave; choice: of the chosen option; score: of the nearest
level), whether the person agreed (``correct``), and a sampling ``weight``.

Why weights: every escalation is resolved, but only a share ``audit_rate`` of the confident
results is audited, so an audit label stands for ``1 / audit_rate`` results. Weighting each
label by the inverse of its chance of being labelled (Horvitz-Thompson) makes the shares and
accuracies estimates for *all* answers, not for the labelled ones; with only escalation
labels (no audits) nothing above the floor is seen, and the report says so.

Figures (``report``):

- accuracy: weighted share of labels the person agreed with;
- Brier score: weighted mean of ``(probability - correct)^2`` over labels with a probability;
- expected calibration error (ECE): labels with a probability put in ``bins`` equal-width
  bins of the probability over [0, 1]; ``sum_b W_b / W * |accuracy_b - mean probability_b|``;
- the reliability table: those bins, each with its label count, mean probability, accuracy
  and interval;
- per candidate threshold ``t``: the share that would escalate (``confidence < t``, a
  missing confidence escalates as the worker does) and the accuracy of the rest.

A label that cannot count is left out of every figure (``countable``; ``Report.left_out``
says how many): a probability or confidence that is NaN, infinite or outside [0, 1], a weight
that is not finite or outside [``MIN_WEIGHT``, ``MAX_WEIGHT``]. A ``shared.labels.Label`` and
the ledger's checks hold the same bounds, but a ledger's rows may also be written by hand or
restored from elsewhere, and one such label must neither raise (a NaN has no bin, ``1e308``
overflows the Brier square, a subnormal weight's square is 0) nor, by its sheer weight,
stand for every label of its group.

Intervals are **Wilson score intervals** (``wilson``) at ``level`` (95 % by default). With
unequal weights the proportion is the weighted one, and ``n`` Kish's effective sample size
``(sum w)^2 / sum w^2``, which the ``min_labels`` guard counts too: never more than the
labels (Cauchy-Schwarz), exactly their number for equal weights, and a function of the
weights alone, so agreement cannot inflate it nor a featherweight label erase it. The
linearised ``p(1-p) / v`` used before measured each group's spread from its own labels, and a
heavy group that all agree (30 audits at rate 0.01, all right, is common) has none: 2 right
audits and 1 wrong escalation made 134.7 labels and a threshold; a featherweight wrong label
made 0 of 41. Simulated coverage of a nominal 95 % (``tests/unit/test_calibration_*``):
audits at 1 % among escalations, 56 % linearised, 97 % Kish's; at 20 %, 94 % and 98.75 %.
Kish's errs wide when the heavy (audited) labels are the more accurate: the safe side.

``suggest`` picks the lowest candidate threshold whose rest-accuracy (estimate, or the
interval's lower bound with ``rule="lower"``) reaches the target at it and at every higher
candidate that keeps enough labels; it refuses, naming why, when the labels are too few.
Never below the lowest confidence a label measured (``lowest_confidence``): below it every
candidate has the same rest, so when the labels are all right the "lowest" was 0, and
answers less confident than any label ever saw were delivered on no evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Final, Literal

__all__ = [
    "DEFAULT_BINS",
    "DEFAULT_LEVEL",
    "DEFAULT_MIN_LABELS",
    "DEFAULT_THRESHOLDS",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "Bin",
    "Interval",
    "Report",
    "Rule",
    "Scored",
    "Suggestion",
    "ThresholdRow",
    "brier",
    "countable",
    "effective_size",
    "effective_text",
    "expected_calibration_error",
    "lowest_confidence",
    "reliability",
    "report",
    "suggest",
    "threshold_table",
    "weighted_share",
    "wilson",
]

DEFAULT_LEVEL: Final = 0.95
DEFAULT_BINS: Final = 10
#: Fewer labels (effective) than this and no threshold is suggested; nor is a candidate
#: judged whose non-escalated side holds fewer.
DEFAULT_MIN_LABELS: Final = 30
#: 0.00, 0.05, ..., 0.95 and 0.97, 0.99: what the trade-off table lists and ``suggest`` tries.
DEFAULT_THRESHOLDS: Final = (*(round(i * 0.05, 2) for i in range(20)), 0.97, 0.99)

#: The heaviest label that counts: an audit at one in a billion, the smallest rate a job may
#: carry (``shared.jobs``). It moves the share as the answers it stands for would, and counts
#: as one label of the effective size (``effective_size``).
MAX_WEIGHT: Final = 1e9
#: The lightest label that counts, MAX_WEIGHT's mirror. No producer here makes a weight below
#: 1 (an audit's is ``1 / rate``, an escalation's 1), but a weight is only relative, and
#: another producer may scale them. Lighter is no weight at all (a subnormal's square is 0);
#: one this light (hand-written, forged) adds next to nothing to the effective size.
MIN_WEIGHT: Final = 1 / MAX_WEIGHT

Rule = Literal["estimate", "lower"]


@dataclass(frozen=True)
class Scored:
    """One label as the statistics see it."""

    correct: bool
    confidence: float | None = None
    probability: float | None = None
    weight: float = 1.0


def countable(label: Scored) -> bool:
    """Whether a label can count: a probability and a confidence that are absent or in
    [0, 1] (NaN is not), a weight in [``MIN_WEIGHT``, ``MAX_WEIGHT``] (nor is NaN)."""
    return (
        (label.probability is None or 0.0 <= label.probability <= 1.0)
        and (label.confidence is None or 0.0 <= label.confidence <= 1.0)
        and MIN_WEIGHT <= label.weight <= MAX_WEIGHT
    )


@dataclass(frozen=True)
class Interval:
    """A proportion, its interval, and the (effective) number of labels behind it."""

    value: float | None
    low: float | None
    high: float | None
    n: float
    labels: int


def wilson(successes: float, n: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n`` (``n`` may be fractional: an
    effective sample size). ``(0, 1)`` for ``n == 0``: nothing is known."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = min(max(successes / n, 0.0), 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # The interval always holds p; at p = 1 (or 0) the closed form lands a rounding error
    # inside it (0.9999999999999999 for 77 of 77), which would leave the estimate, and a true
    # share of 1, outside its own interval.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def weighted_share(
    pairs: Iterable[tuple[bool, float]], level: float = DEFAULT_LEVEL
) -> Interval:
    """The weighted share of ``True`` among ``(flag, weight)`` pairs, with its interval."""
    kept = [(bool(flag), float(weight)) for flag, weight in pairs]
    total = math.fsum(w for _, w in kept)
    if not kept or total <= 0:
        return Interval(None, None, None, 0.0, len(kept))
    share = math.fsum(w for flag, w in kept if flag) / total
    labels = len(kept)
    n_eff = effective_size([w for _, w in kept])
    low, high = wilson(share * n_eff, n_eff, level)
    return Interval(share, low, high, n_eff, labels)


def effective_size(weights: Sequence[float]) -> float:
    """Kish's effective sample size ``(sum w)^2 / sum w^2`` of positive ``weights`` (0 for
    none): at most ``len(weights)``, exactly that when every weight is the same."""
    top = max(weights, default=0.0)
    if top <= 0:
        return 0.0
    # Scaled by the heaviest so equal weights give exactly 1s (30 labels of weight 0.1 are
    # 30, not 29.999999999999996, at a min_labels of 30) and no square over- or underflows.
    scaled = [w / top for w in weights]
    size = math.fsum(scaled) ** 2 / math.fsum(w * w for w in scaled)
    return min(size, float(len(weights)))


def effective_text(size: float) -> str:
    """An effective size as the reports print it: rounded down to a tenth, so a size the
    ``min_labels`` guard refuses never reads as enough (29.97 is "29.9", not "30.0")."""
    return f"{math.floor(size * 10) / 10:.1f}"


def brier(labels: Sequence[Scored]) -> float | None:
    """Weighted mean squared gap between probability and outcome; None without probabilities."""
    pairs = [(s.probability, s) for s in labels if s.probability is not None]
    total = sum(s.weight for _, s in pairs)
    if not pairs or total <= 0:
        return None
    return sum(s.weight * (p - float(s.correct)) ** 2 for p, s in pairs) / total


@dataclass(frozen=True)
class Bin:
    """One bin of the reliability table: ``low <= probability < high`` (the last includes 1)."""

    low: float
    high: float
    labels: int
    weight: float
    mean_probability: float | None
    accuracy: Interval


def _bin_index(probability: float, bins: int) -> int:
    return min(int(probability * bins), bins - 1)


def reliability(
    labels: Sequence[Scored], bins: int = DEFAULT_BINS, level: float = DEFAULT_LEVEL
) -> list[Bin]:
    """Every bin, empty ones included, in order (labels without a probability left out)."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    grouped: list[list[tuple[float, Scored]]] = [[] for _ in range(bins)]
    for s in labels:
        if s.probability is not None:
            p = min(max(s.probability, 0.0), 1.0)
            grouped[_bin_index(p, bins)].append((p, s))
    out = []
    for i, pairs in enumerate(grouped):
        members = [s for _, s in pairs]
        weight = sum(s.weight for s in members)
        mean = sum(s.weight * p for p, s in pairs) / weight if pairs and weight > 0 else None
        out.append(
            Bin(
                low=i / bins,
                high=(i + 1) / bins,
                labels=len(members),
                weight=weight,
                mean_probability=mean,
                accuracy=weighted_share(((s.correct, s.weight) for s in members), level),
            )
        )
    return out


def expected_calibration_error(table: Sequence[Bin]) -> float | None:
    """ECE over a reliability table: the weight-averaged gap between accuracy and probability."""
    total = sum(b.weight for b in table)
    if total <= 0:
        return None
    gaps = 0.0
    for b in table:
        if b.weight > 0 and b.mean_probability is not None and b.accuracy.value is not None:
            gaps += b.weight * abs(b.accuracy.value - b.mean_probability)
    return gaps / total


@dataclass(frozen=True)
class ThresholdRow:
    """What ``escalate_below: threshold`` would have done to these labels."""

    threshold: float
    escalated: Interval
    rest_accuracy: Interval


def _escalates(s: Scored, threshold: float) -> bool:
    # As the worker decides (shared.verdicts): no confidence escalates whenever a floor is set.
    return s.confidence is None or s.confidence < threshold


def threshold_table(
    labels: Sequence[Scored],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    level: float = DEFAULT_LEVEL,
) -> list[ThresholdRow]:
    rows = []
    for t in thresholds:
        escalated = weighted_share(((_escalates(s, t), s.weight) for s in labels), level)
        rest = [s for s in labels if not _escalates(s, t)]
        accuracy = weighted_share(((s.correct, s.weight) for s in rest), level)
        rows.append(ThresholdRow(t, escalated, accuracy))
    return rows


def lowest_confidence(labels: Iterable[Scored]) -> float | None:
    """The lowest confidence among ``labels`` (None if none has one): below it the labels
    measured nothing. A missing confidence is not a measurement (it escalates at any floor)."""
    return min((s.confidence for s in labels if s.confidence is not None), default=None)


@dataclass(frozen=True)
class Suggestion:
    """A suggested ``escalate_below`` for a target accuracy, or why there is none."""

    target: float
    threshold: float | None
    row: ThresholdRow | None
    reason: str
    rule: Rule = "estimate"


def suggest(
    table: Sequence[ThresholdRow],
    target: float,
    *,
    labels: float,
    min_labels: float = DEFAULT_MIN_LABELS,
    rule: Rule = "estimate",
    lowest: float | None = None,
) -> Suggestion:
    """The lowest threshold of ``table`` whose rest-accuracy reaches ``target`` there and at
    every higher threshold that keeps ``min_labels`` (effective) labels on its rest side,
    raised to ``lowest`` when below it.

    ``labels``: the effective number of labels behind the table; below ``min_labels`` the
    suggestion is refused. Refused too when no threshold reaches the target. ``lowest``: the
    lowest confidence of the labels behind the table (``lowest_confidence``; ``report``
    passes it); None leaves the table's threshold as it is.
    """
    if not 0 < target < 1:
        raise ValueError(f"target must be between 0 and 1 (exclusive), not {target}")
    if labels < min_labels:
        return Suggestion(
            target, None, None,
            f"too few labels: {effective_text(labels)} (effective), at least "
            f"{min_labels:g} needed",
            rule,
        )

    def reaches(row: ThresholdRow) -> bool:
        figure = row.rest_accuracy.value if rule == "estimate" else row.rest_accuracy.low
        return figure is not None and figure >= target

    ordered = sorted(table, key=lambda r: r.threshold)
    judged = [r for r in ordered if r.rest_accuracy.n >= min_labels]
    if not judged:
        return Suggestion(
            target, None, None,
            f"no threshold keeps {min_labels:g} (effective) labels on its confident side",
            rule,
        )
    chosen: ThresholdRow | None = None
    for row in reversed(judged):
        if not reaches(row):
            break
        chosen = row
    if chosen is None:
        top = judged[-1]
        return Suggestion(
            target, None, None,
            f"no threshold reaches {target:g}: at {top.threshold:g} the rest is "
            f"{_pct(top.rest_accuracy.value)} right ({top.rest_accuracy.labels} labels)",
            rule,
        )
    if lowest is not None and chosen.threshold < lowest:
        # Every candidate at or below the lowest measured confidence has the same rest (all
        # the labels with a confidence) and escalates the same (those without), so the chosen
        # row's figures are exactly those of ``lowest`` itself. Exactly ``lowest``, not the
        # grid step at or below it: answers are escalated when ``confidence < threshold``
        # (shared.verdicts), so at ``lowest`` the least confident answer the labels measured
        # is still delivered and anything below it, which no label speaks for, escalates; a
        # grid step below (0.55 for a lowest of 0.57) would deliver 0.55 to 0.57 unmeasured,
        # the step above would escalate answers the labels did measure.
        raised = replace(chosen, threshold=lowest)
        return Suggestion(
            target, lowest, raised,
            f"at {lowest!r} (the lowest confidence a label measured: no label speaks for "
            f"answers below it) the rest is {_pct(raised.rest_accuracy.value)} right "
            f"[{_pct(raised.rest_accuracy.low)}, {_pct(raised.rest_accuracy.high)}], "
            f"{_pct(raised.escalated.value)} escalate",
            rule,
        )
    return Suggestion(
        target, chosen.threshold, chosen,
        f"at {chosen.threshold:g} the rest is {_pct(chosen.rest_accuracy.value)} right "
        f"[{_pct(chosen.rest_accuracy.low)}, {_pct(chosen.rest_accuracy.high)}], "
        f"{_pct(chosen.escalated.value)} escalate",
        rule,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


@dataclass(frozen=True)
class Report:
    """Every figure for one group of labels: ``labels`` those that counted, ``left_out``
    those that could not (``countable``)."""

    labels: int
    effective_labels: float
    accuracy: Interval
    brier: float | None
    ece: float | None
    bins: list[Bin]
    thresholds: list[ThresholdRow]
    suggestion: Suggestion | None = None
    sources: dict[str, int] = field(default_factory=dict)
    left_out: int = 0


def report(
    labels: Sequence[Scored],
    *,
    target: float | None = None,
    bins: int = DEFAULT_BINS,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    level: float = DEFAULT_LEVEL,
    min_labels: float = DEFAULT_MIN_LABELS,
    rule: Rule = "estimate",
) -> Report:
    """Every figure over the labels that can count (``countable``; the others are only
    counted, in ``left_out``)."""
    kept = [s for s in labels if countable(s)]
    accuracy = weighted_share(((s.correct, s.weight) for s in kept), level)
    table = reliability(kept, bins, level)
    rows = threshold_table(kept, thresholds, level)
    suggestion = None
    if target is not None:
        suggestion = suggest(
            rows, target, labels=accuracy.n, min_labels=min_labels, rule=rule,
            lowest=lowest_confidence(kept),
        )
    return Report(
        labels=len(kept),
        effective_labels=accuracy.n,
        accuracy=accuracy,
        brier=brier(kept),
        ece=expected_calibration_error(table),
        bins=table,
        thresholds=rows,
        suggestion=suggestion,
        left_out=len(labels) - len(kept),
    )
