"""``decisions calibration``: how right the machine is, per question, provider and model,
from reviewers' labels, and which ``escalate_below`` reaches a target accuracy.

It first stores the labels waiting on the label stream (``worker.calibration.intake``; skip
with ``--no-store``), then reads the ledger's labels through the filters and prints, per
group: the labels used (from audits, from escalations; those that cannot count, such as a
NaN probability, are left out and their number said), accuracy, Brier score, expected
calibration error, the reliability table and the accuracy/escalation trade-off, each share
with its 95 % Wilson score interval (``shared.calibration``), and the suggested threshold
for ``--target`` (refused, with the reason, when the labels are too few). Tables fit 80
columns; ``--json`` prints the same figures for tools.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import asdict
from datetime import datetime
from typing import Any

import redis
import typer
from rich.text import Text

from shared.calibration import (
    DEFAULT_BINS,
    DEFAULT_MIN_LABELS,
    Interval,
    Rule,
    effective_text,
)
from shared.redis_connect import redis_client
from shared.settings import get_settings
from worker.calibration import GroupReport, group_reports, store_label_stream
from worker.cli.option_values import identifier, in_utc_range, name, non_negative, time_ago
from worker.cli.terminal import err_console
from worker.ledger import Ledger
from worker.ledger.label_ops import LabelFilter

__all__ = ["register", "render_group"]

_SINCE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def register(app: typer.Typer) -> None:
    app.command("calibration")(calibration)


def _checked_since(value: str | None) -> str | None:
    # Read as it is parsed too (a callback): a bad one is refused before the ledger is
    # opened, and click names the option in the refusal.
    _since(value)
    return value


def calibration(
    batch: str | None = typer.Option(
        None, "--batch", callback=identifier, help="labels of one batch only"
    ),
    question: str | None = typer.Option(
        None, "--question", callback=name, help="one question id only"
    ),
    provider: str | None = typer.Option(
        None, "--provider", callback=name, help="one provider only"
    ),
    model: str | None = typer.Option(
        None, "--model", callback=name, help="one model (as receipts name it)"
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        callback=_checked_since,
        help="labels resolved since: an ISO date/time, or 36h, 7d, ...",
    ),
    source: str | None = typer.Option(
        None, "--source", help="audit or escalation: only labels of that source"
    ),
    target: float = typer.Option(
        0.95, "--target", help="the accuracy the suggested escalate_below should reach"
    ),
    rule: str = typer.Option(
        "estimate",
        "--rule",
        help="estimate: the rest's accuracy reaches the target; lower: its interval's "
        "lower bound does",
    ),
    min_labels: float = typer.Option(
        float(DEFAULT_MIN_LABELS),
        "--min-labels",
        callback=non_negative,
        help="fewer (effective): no suggestion",
    ),
    bins: int = typer.Option(DEFAULT_BINS, "--bins", help="reliability bins over [0, 1]"),
    store: bool = typer.Option(
        True, "--store/--no-store", help="store the labels waiting on Redis first"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """Calibration per question, provider and model, from reviewers' labels."""
    if not 0 < target < 1:
        raise typer.BadParameter(f"{target} is not between 0 and 1", param_hint="--target")
    if rule not in ("estimate", "lower"):
        raise typer.BadParameter(f"{rule!r}: estimate or lower", param_hint="--rule")
    if source not in (None, "audit", "escalation"):
        raise typer.BadParameter(f"{source!r}: audit or escalation", param_hint="--source")
    if not 1 <= bins <= 50:
        raise typer.BadParameter(f"{bins}: 1 to 50", param_hint="--bins")
    settings = get_settings()
    ledger = Ledger.from_settings(settings)
    ledger.check_schema()
    if store:
        try:
            store_label_stream(ledger, redis_client(settings.redis_url))
        except redis.RedisError as exc:
            # The stored labels still tell something: say what was left out, go on.
            # The server without its password (in the userinfo or, for redis-py, the query).
            server = settings.redis_url.split("@")[-1].split("?")[0]
            err_console.print(
                Text(
                    f"labels waiting on Redis not stored ({server}: {type(exc).__name__}); "
                    "showing the ledger's",
                    "yellow",
                ),
                highlight=False,
            )
    where = LabelFilter(
        batch=batch,
        question=question,
        provider=provider,
        model=model,
        since=_since(since),
        source=source,
    )
    rule_checked: Rule = "lower" if rule == "lower" else "estimate"
    reports = group_reports(
        ledger.labels(where), target=target, bins=bins, min_labels=min_labels, rule=rule_checked
    )
    if as_json:
        typer.echo(json.dumps([_as_json(g) for g in reports], indent=2, sort_keys=True))
        return
    if not reports:
        typer.echo("no labels match (labels come from resolved escalations and audits)")
        return
    for i, group in enumerate(reports):
        if i:
            typer.echo("")
        typer.echo(render_group(group))


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    relative = _SINCE.match(value.strip())
    if relative:
        amount, unit = relative.groups()
        return time_ago(value, **{_UNITS[unit]: int(amount)})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r}: an ISO date or time (2026-12-01, 2026-12-01T09:00Z) or 36h, 7d"
        ) from None
    return in_utc_range(value, moment)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _ci(interval: Interval) -> str:
    if interval.low is None or interval.high is None:
        return ""
    return f"[{interval.low * 100:.1f}, {interval.high * 100:.1f}]"


def render_group(group: GroupReport) -> str:
    """One group's figures as text no wider than 80 columns."""
    figures = group.report
    lines = [
        _fit(
            f"question {group.question} ({group.question_type}) - provider "
            f"{group.provider or '-'} - model {group.model or '-'}"
        ),
        _fit(
            f"labels {figures.labels} (audit {group.sources.get('audit', 0)}, escalation "
            f"{group.sources.get('escalation', 0)}), effective "
            f"{effective_text(figures.effective_labels)}"
        ),
    ]
    if figures.left_out:
        lines += _wrap(
            f"note: left out {figures.left_out} label{'' if figures.left_out == 1 else 's'} "
            "that cannot count: a probability or confidence not in [0, 1], or a weight no "
            "audit rate gives (fix them in the ledger's labels table)"
        )
    if group.caveat:
        lines += _wrap(f"note: {group.caveat}")
    brier = "-" if figures.brier is None else f"{figures.brier:.4f}"
    ece = "-" if figures.ece is None else f"{figures.ece:.4f}"
    lines.append(
        f"accuracy {_pct(figures.accuracy.value)} {_ci(figures.accuracy)}  "
        f"Brier {brier}  ECE {ece}"
    )
    lines.append("")
    lines.append("reliability (the machine's probability of its answer, by bin; 95% Wilson)")
    lines.append(f"{'bin':<11} {'labels':>7} {'stated':>8} {'observed':>9} {'interval':<14} gap")
    for b in figures.bins:
        if not b.labels:
            continue
        gap = (
            ""
            if b.mean_probability is None or b.accuracy.value is None
            else f"{(b.accuracy.value - b.mean_probability) * 100:+.1f}"
        )
        lines.append(
            f"{b.low:.2f}-{b.high:.2f}  {b.labels:>7} {_pct(b.mean_probability):>8} "
            f"{_pct(b.accuracy.value):>9} {_ci(b.accuracy):<14} {gap}"
        )
    lines.append("")
    lines.append("trade-off (escalate_below = t; confidence below t escalates; 95% Wilson)")
    lines.append(
        f"{'t':>5}  {'escalate':>8} {'interval':<14} {'rest right':>10} {'interval':<14} "
        f"{'labels':>7}"
    )
    for row in figures.thresholds:
        lines.append(
            f"{row.threshold:>5.2f}  {_pct(row.escalated.value):>8} {_ci(row.escalated):<14} "
            f"{_pct(row.rest_accuracy.value):>10} {_ci(row.rest_accuracy):<14} "
            f"{row.rest_accuracy.labels:>7}"
        )
    suggestion = figures.suggestion
    if suggestion is not None:
        lines.append("")
        if suggestion.threshold is None:
            lines += _wrap(f"no escalate_below suggested for {suggestion.target:g}: "
                           f"{suggestion.reason}")
        else:
            lines += _wrap(
                f"suggested escalate_below for {suggestion.target:g} ({suggestion.rule}): "
                f"{_exact(suggestion.threshold)} - {suggestion.reason}"
            )
    return "\n".join(lines)


def _exact(threshold: float) -> str:
    """A threshold as short as it reads, but exact: a suggestion raised to the lowest measured
    confidence may be off the grid (0.5512345), and one copied as a floor from a rounded
    0.551234 would deliver answers below every label."""
    text = f"{threshold:g}"
    return text if float(text) == threshold else repr(threshold)


def _fit(line: str) -> str:
    return "\n".join(_wrap(line))


def _wrap(text: str, width: int = 80) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def _as_json(group: GroupReport) -> dict[str, Any]:
    figures = group.report
    return {
        "question": group.question,
        "question_type": group.question_type,
        "provider": group.provider,
        "model": group.model,
        "sources": group.sources,
        "audited": group.audited,
        "caveat": group.caveat,
        "labels": figures.labels,
        "left_out": figures.left_out,
        "effective_labels": figures.effective_labels,
        "accuracy": asdict(figures.accuracy),
        "brier": figures.brier,
        "ece": figures.ece,
        "interval": "wilson",
        "level": 0.95,
        "bins": [asdict(b) for b in figures.bins],
        "thresholds": [asdict(r) for r in figures.thresholds],
        "suggestion": None if figures.suggestion is None else {
            "target": figures.suggestion.target,
            "escalate_below": figures.suggestion.threshold,
            "rule": figures.suggestion.rule,
            "reason": figures.suggestion.reason,
        },
    }

