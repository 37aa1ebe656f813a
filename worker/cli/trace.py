"""``decisions trace JOB_ID``: a job's calls as a tree, from the ledger.

Model calls (``pick.0``, re-picks ``pick.1`` ..., work turns ``turn.N``) at the top, each
turn's tool executions (``tool.N``) under it, a handler's or tool's own model calls
(``handler.call.0``) under them, and the handler last; each with its status, timing, cost
and the head of its reply (or result). A decide job shows its one ``decide`` call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.markup import escape
from rich.tree import Tree

from shared.settings import get_settings
from worker.cli.console import console, err_console
from worker.ledger import CallRow, JobRow, Ledger
from worker.menus import HANDLER_PROVIDER

__all__ = ["Node", "build_tree", "register"]

HEAD_CHARS = 90


@dataclass
class Node:
    call: CallRow
    children: list[Node] = field(default_factory=list)


def _outcome(call: CallRow) -> dict[str, Any]:
    try:
        value = json.loads(call.outcome_json) if call.outcome_json else {}
    except ValueError:
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


def _timing(call: CallRow) -> str:
    latency = None
    if call.receipt_json:
        try:
            latency = json.loads(call.receipt_json).get("latency_ms")
        except ValueError:
            latency = None
    if latency is None and call.finished_at is not None:
        latency = (call.finished_at - call.claimed_at).total_seconds() * 1000
    return "-" if latency is None else f"{latency:.1f} ms"


def _cost(call: CallRow) -> str:
    if call.provider == HANDLER_PROVIDER:
        return "no cost"
    if call.cost_usd is None:
        return "cost unknown" if call.status in ("answered", "failed", "unknown") else "-"
    return f"${call.cost_usd:.6f} ({call.cost_basis or 'no basis'})"


def _packed(call: CallRow) -> str:
    """Whom the call's request was shared with, and what that saved this job."""
    packed: dict[str, object] = {}
    if call.receipt_json:
        try:
            packed = json.loads(call.receipt_json).get("packed") or {}
        except ValueError:
            packed = {}
    text = f"packed {(call.pack_id or '')[:12]}"
    if packed.get("jobs"):
        text += f" with {packed['jobs']} jobs"
    saved = packed.get("saved_usd")
    if isinstance(saved, int | float):
        text += f", saved ${saved:.6f}"
    return text


def _head(call: CallRow) -> str:
    outcome = _outcome(call)
    head = outcome.get("head")
    if head is None and "error" in outcome:
        head = outcome["error"]
    if head is None and call.outcome_json:
        head = call.outcome_json
    if head is None:
        return ""
    text = " ".join(str(head).split())
    return text if len(text) <= HEAD_CHARS else text[: HEAD_CHARS - 1] + "…"


def _label(call: CallRow) -> str:
    style = _STATUS_STYLE.get(call.status, "")
    who = f"{call.provider}/{call.model}" if call.model else call.provider
    if call.provider == HANDLER_PROVIDER:
        who = call.model or "?"
    parts = [
        f"[bold]{escape(call.step)}[/]",
        f"{_kind(call.step)} {escape(who)}",
        f"[{style}]{call.status}[/]" if style else call.status,
        _timing(call),
        _cost(call),
    ]
    if call.error_code:
        parts.append(f"[red]{escape(call.error_code)}[/]")
    if call.claims > 1:
        parts.append(f"claims {call.claims}")
    if call.pack_id:
        parts.append(_packed(call))
    line = "  ".join(parts)
    head = _head(call)
    return f"{line}\n[dim]{escape(head)}[/]" if head else line


def _job_label(row: JobRow) -> str:
    outcome = row.terminal_type or "open"
    if row.terminal_reason:
        outcome = f"{outcome}: {row.terminal_reason}"
    batch = f"  batch {escape(row.batch)}" if row.batch else ""
    return f"[bold]job {escape(row.job_id)}[/]  {row.kind}{batch}  [bold]{escape(outcome)}[/]"


def render(row: JobRow, calls: list[CallRow]) -> Tree:
    tree = Tree(_job_label(row))

    def add(parent: Tree, node: Node) -> None:
        branch = parent.add(_label(node.call))
        for child in node.children:
            add(branch, child)

    for node in build_tree(calls):
        add(tree, node)
    if not calls:
        tree.add("[dim]no calls[/]")
    return tree


def _as_json(row: JobRow, calls: list[CallRow]) -> dict[str, Any]:
    def node(n: Node) -> dict[str, Any]:
        call = n.call
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
            "head": _head(call),
            "children": [node(c) for c in n.children],
        }

    return {
        "job_id": row.job_id,
        "kind": row.kind,
        "batch": row.batch,
        "outcome": row.terminal_type,
        "reason": row.terminal_reason,
        "calls": [node(n) for n in build_tree(calls)],
    }


def register(app: typer.Typer) -> None:
    @app.command("trace")
    def trace(
        job_id: str = typer.Argument(..., help="the job's id"),
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
        if as_json:
            typer.echo(json.dumps(_as_json(row, calls), indent=2))
            return
        console.print(render(row, calls))
