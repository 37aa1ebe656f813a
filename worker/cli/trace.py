"""``decisions trace JOB_ID``: a job's calls as a tree, from the ledger, and the reviewer's
resolution of its escalation (who, when, the answer) from Redis
(``worker.cli.trace_resolution``, re-exported here).

Model calls (``pick.0``, re-picks ``pick.1`` ..., work turns ``turn.N``) at the top, each
turn's tool executions (``tool.N``) under it, a handler's or tool's own model calls
(``handler.call.0``) under them, and the handler last; each with its status, timing, cost
and its whole reply (or result). A decide job shows its one ``decide`` call.

A call's stored JSON (``receipt_json``, ``outcome_json``) is read, never trusted (``_read``):
a ledger is also written by hand, restored from an older schema or damaged. What cannot be
read (not JSON, nested deeper than the parser goes, a field of the wrong shape) is shown as
one line naming the call and the column, ``unreadable`` in ``--json``, and the rest of the
trace is printed as usual.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.markup import escape
from rich.tree import Tree

from shared.settings import get_settings
from shared.visible_text import visible
from worker.cli.option_values import identifier
from worker.cli.terminal import console, err_console
from worker.cli.trace_resolution import (
    Resolution,
    lookup_resolution,
    resolution_json,
    resolution_label,
    resolution_of,
)
from worker.kinds.menus import HANDLER_PROVIDER
from worker.ledger import CallRow, JobRow, Ledger

__all__ = ["Node", "Resolution", "build_tree", "register", "resolution_of"]


@dataclass
class Node:
    call: CallRow
    children: list[Node] = field(default_factory=list)


def _load(text: str) -> tuple[Any, str | None]:
    """``text`` as JSON, or why it is not (the parser raises RecursionError, not ValueError,
    on JSON nested too deep)."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "nested too deep to read"
    except ValueError:
        return None, "not JSON"


def _outcome(call: CallRow) -> dict[str, Any]:
    value, problem = _load(call.outcome_json) if call.outcome_json else ({}, None)
    if problem is not None:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def build_tree(calls: list[CallRow]) -> list[Node]:
    """The calls nested: tools under the turn that asked for them, nested calls under their
    parent; in the order they were claimed."""
    nodes = {c.step: Node(c) for c in calls}
    roots: list[Node] = []
    for call in calls:
        node = nodes[call.step]
        parent: str | None = None
        if ".call." in call.step:
            parent = call.step.rsplit(".call.", 1)[0]
        elif call.step.startswith("tool."):
            turn = _outcome(call).get("turn")
            parent = turn if isinstance(turn, str) else None
        if parent is not None and parent in nodes:
            nodes[parent].children.append(node)
        else:
            roots.append(node)
    return roots


def _kind(step: str) -> str:
    if ".call." in step:
        return "model call"
    if step == "pick.0":
        return "pick"
    if step.startswith("pick."):
        return "re-pick"
    if step.startswith("turn."):
        return "turn"
    if step.startswith("tool."):
        return "tool"
    return {"handler": "handler", "decide": "decision"}.get(step, "call")


_STATUS_STYLE = {
    "answered": "green",
    "failed": "red",
    "unknown": "bold red",
    "claimed": "yellow",
    "not_sent": "dim",
}


def _cost(call: CallRow) -> str:
    if call.provider == HANDLER_PROVIDER:
        return "no cost"
    if call.cost_usd is None:
        return "cost unknown" if call.status in ("answered", "failed", "unknown") else "-"
    return f"${call.cost_usd:.6f} ({call.cost_basis or 'no basis'})"


#: Notes why a column of the call cannot be read (the first problem of each is kept).
_Note = Callable[[str, str], None]


@dataclass(frozen=True)
class _Read:
    """What the trace shows of a call's stored JSON, and what of it could not be read:
    ``unreadable`` maps a column to why."""

    timing: str
    packed: str
    head: str
    unreadable: dict[str, str]


def _read(call: CallRow) -> _Read:
    """The call's timing, packing and whole answer; a damaged part is noted (the first
    problem of each column), never raised, and left out of what is shown."""
    problems: dict[str, str] = {}

    def note(column: str, why: str) -> None:
        problems.setdefault(column, why)

    outcome: dict[str, Any] = {}
    raw = call.outcome_json or None
    if raw is not None:
        value, problem = _load(raw)
        if problem is not None:
            note("outcome_json", problem)
            raw = None
        else:
            outcome = value if isinstance(value, dict) else {"value": value}
    receipt: dict[str, Any] = {}
    if call.receipt_json:
        value, problem = _load(call.receipt_json)
        if problem is not None or not isinstance(value, dict):
            note("receipt_json", problem or "not a JSON object")
        else:
            receipt = value
    timing = _timing(call, receipt, note)
    packed = _packed(call, receipt, note) if call.pack_id else ""
    head = _head(outcome, raw, note)
    return _Read(timing, packed, head, problems)


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _timing(call: CallRow, receipt: dict[str, Any], note: _Note) -> str:
    latency = receipt.get("latency_ms")
    if latency is not None and not _number(latency):
        note("receipt_json", "latency_ms is not a number")
        latency = None
    if latency is None and call.finished_at is not None:
        latency = (call.finished_at - call.claimed_at).total_seconds() * 1000
    return "-" if latency is None else f"{latency:.1f} ms"


def _packed(call: CallRow, receipt: dict[str, Any], note: _Note) -> str:
    """Whom the call's request was shared with, and what that saved this job."""
    packed = receipt.get("packed") or {}
    if not isinstance(packed, dict):
        note("receipt_json", "packed is not an object")
        packed = {}
    text = f"packed {(call.pack_id or '')[:12]}"
    jobs = packed.get("jobs")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)):
        note("receipt_json", "packed.jobs is not a count")
    elif jobs:
        text += f" with {jobs} jobs"
    saved = packed.get("saved_usd")
    if saved is not None and not _number(saved):
        note("receipt_json", "packed.saved_usd is not a number")
    elif saved is not None:
        text += f", saved ${saved:.6f}"
    return text


def _head(outcome: dict[str, Any], raw: str | None, note: _Note) -> str:
    """The call's whole answer: the stored reply, content or value (the stored ``head`` is
    cut short by the runner), or its error; never cut here either. ``raw``: the outcome as
    stored, shown when it names none of those (None when it could not be read)."""
    reply = outcome.get("reply")
    if isinstance(reply, dict):
        text = reply.get("text") or reply.get("refusal") or ""
        if not isinstance(text, str):
            note("outcome_json", "the reply's text is not text")
            text = ""
        tool_calls = reply.get("tool_calls") or []
        if not isinstance(tool_calls, list):
            note("outcome_json", "reply.tool_calls is not a list")
            tool_calls = []
        names = [c.get("name") for c in tool_calls if isinstance(c, dict)]
        if names:
            shown = ", ".join(n if isinstance(n, str) else "?" for n in names)
            text = f"{text} [tool calls: {shown}]".strip()
        if text:
            return " ".join(text.split())
    head: Any = None
    for name in ("content", "value", "error", "head"):
        if outcome.get(name) is not None:
            head = outcome[name]
            break
    if head is None:
        head = raw
    if head is None:
        return ""
    if not isinstance(head, str):
        try:
            head = json.dumps(head, ensure_ascii=False)
        except RecursionError:  # read, but too deep to write back at this depth
            note("outcome_json", "nested too deep to show")
            return ""
    return " ".join(head.split())


def _label(call: CallRow) -> str:
    style = _STATUS_STYLE.get(call.status, "")
    who = f"{call.provider}/{call.model}" if call.model else call.provider
    if call.provider == HANDLER_PROVIDER:
        who = call.model or "?"
    read = _read(call)
    parts = [
        f"[bold]{escape(call.step)}[/]",
        f"{_kind(call.step)} {escape(who)}",
        f"[{style}]{call.status}[/]" if style else call.status,
        read.timing,
        _cost(call),
    ]
    if call.error_code:
        parts.append(f"[red]{escape(call.error_code)}[/]")
    if call.claims > 1:
        parts.append(f"claims {call.claims}")
    if call.pack_id:
        parts.append(read.packed)
    lines = ["  ".join(parts)]
    if read.head:
        # A model's reply: an ESC or bidi control in it is named, never sent to the terminal.
        lines.append(f"[dim]{escape(visible(read.head))}[/]")
    lines += [
        f"[yellow]{column} of {escape(call.step)} unreadable: {why}[/]"
        for column, why in read.unreadable.items()
    ]
    return "\n".join(lines)


def _job_label(row: JobRow) -> str:
    outcome = row.terminal_type or "open"
    if row.terminal_reason:
        outcome = f"{outcome}: {row.terminal_reason}"
    batch = f"  batch {escape(row.batch)}" if row.batch else ""
    return f"[bold]job {escape(row.job_id)}[/]  {row.kind}{batch}  [bold]{escape(outcome)}[/]"


def render(row: JobRow, calls: list[CallRow], resolution: Resolution | str | None = None) -> Tree:
    tree = Tree(_job_label(row))

    def add(parent: Tree, node: Node) -> None:
        branch = parent.add(_label(node.call))
        for child in node.children:
            add(branch, child)

    for node in build_tree(calls):
        add(tree, node)
    if not calls:
        tree.add("[dim]no calls[/]")
    if isinstance(resolution, Resolution):
        tree.add(resolution_label(resolution))
    elif resolution is not None:
        tree.add(f"[yellow]resolution: {escape(resolution)}[/]")
    return tree


def _as_json(
    row: JobRow, calls: list[CallRow], resolution: Resolution | str | None
) -> dict[str, Any]:
    def node(n: Node) -> dict[str, Any]:
        call = n.call
        read = _read(call)
        return {
            "step": call.step,
            "kind": _kind(call.step),
            "provider": call.provider,
            "model": call.model,
            "status": call.status,
            "claims": call.claims,
            "claimed_at": call.claimed_at.isoformat(),
            "finished_at": call.finished_at.isoformat() if call.finished_at else None,
            "cost_usd": call.cost_usd,
            "cost_basis": call.cost_basis,
            "error_code": call.error_code,
            "head": read.head,
            "unreadable": [{"column": c, "why": why} for c, why in read.unreadable.items()],
            "children": [node(c) for c in n.children],
        }

    return {
        "job_id": row.job_id,
        "kind": row.kind,
        "batch": row.batch,
        "outcome": row.terminal_type,
        "reason": row.terminal_reason,
        "calls": [node(n) for n in build_tree(calls)],
        "resolution": resolution_json(resolution),
    }


def register(app: typer.Typer) -> None:
    @app.command("trace")
    def trace(
        job_id: str = typer.Argument(..., callback=identifier, help="the job's id"),
        as_json: bool = typer.Option(False, "--json", help="print the tree as JSON"),
    ) -> None:
        """A job's calls as a tree: model calls, re-picks, tools, handler; status, time, cost."""
        ledger = Ledger.from_settings(get_settings())
        ledger.check_schema()
        row = ledger.get_job(job_id)
        if row is None:
            err_console.print(f"[red]no job {escape(job_id)} in the ledger[/] ({ledger.url})")
            raise typer.Exit(1)
        calls = ledger.calls(job_id)
        resolution = lookup_resolution(row)
        if as_json:
            typer.echo(json.dumps(_as_json(row, calls, resolution), indent=2))
            return
        console.print(render(row, calls, resolution))
