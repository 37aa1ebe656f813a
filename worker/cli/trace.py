"""``decisions trace JOB_ID``: a job's calls as a tree, from the ledger, and the reviewer's
resolution of its escalation (who, when, the answer) from Redis.

Model calls (``pick.0``, re-picks ``pick.1`` ..., work turns ``turn.N``) at the top, each
turn's tool executions (``tool.N``) under it, a handler's or tool's own model calls
(``handler.call.0``) under them, and the handler last; each with its status, timing, cost
and its whole reply (or result). A decide job shows its one ``decide`` call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
import typer
from rich.markup import escape
from rich.tree import Tree

from shared import keys
from shared.replies import ResolutionMessage, parse_reply
from shared.settings import get_settings
from worker.cli.terminal import console, err_console
from worker.kinds.menus import HANDLER_PROVIDER
from worker.ledger import CallRow, JobRow, Ledger

__all__ = ["Node", "Resolution", "build_tree", "register", "resolution_of"]


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
    """The call's whole answer: the stored reply, content or value (the stored ``head`` is
    cut short by the runner), or its error; never cut here either."""
    outcome = _outcome(call)
    reply = outcome.get("reply")
    if isinstance(reply, dict):
        text = reply.get("text") or reply.get("refusal") or ""
        names = [c.get("name") for c in reply.get("tool_calls") or [] if isinstance(c, dict)]
        if names:
            text = f"{text} [tool calls: {', '.join(str(n) for n in names)}]".strip()
        if text:
            return " ".join(str(text).split())
    head: Any = None
    for name in ("content", "value", "error", "head"):
        if outcome.get(name) is not None:
            head = outcome[name]
            break
    if head is None and call.outcome_json:
        head = call.outcome_json
    if head is None:
        return ""
    if not isinstance(head, str):
        head = json.dumps(head, ensure_ascii=False)
    return " ".join(head.split())


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


@dataclass(frozen=True)
class Resolution:
    """A reviewer's answer to the job's escalation, as recorded in Redis."""

    reviewer: str
    at: datetime | None
    answer: Any
    #: Why it could not be read in full (Redis down, the reply entry trimmed); None if read.
    problem: str | None = None


def resolution_of(client: redis.Redis, row: JobRow) -> Resolution | None:
    """The job's resolution: who and when from ``keys.resolved_record``, the answer from the
    resolution message in the job's reply stream; None if nobody resolved it."""
    raw: Any = client.hgetall(keys.resolved_record(row.job_id))
    record = {_text(k): _text(v) for k, v in raw.items()}
    if not record:
        return None
    at_ms = record.get("resolved_at_ms")
    at = datetime.fromtimestamp(int(at_ms) / 1000, UTC) if at_ms and at_ms.isdigit() else None
    reviewer = record.get("reviewer", "?")
    entry = record.get("reply_entry_id")
    if not entry or not keys.is_reply_name(row.reply_to):
        return Resolution(reviewer, at, None, "the resolution message's entry is not recorded")
    rows: Any = client.xrange(keys.reply_stream(row.reply_to), min=entry, max=entry)
    if not rows:
        return Resolution(reviewer, at, None, f"entry {entry} is no longer in {row.reply_to!r}")
    fields = {_text(k): _text(v) for k, v in rows[0][1].items()}
    try:
        message = parse_reply(fields.get("message", ""))
    except ValueError:
        return Resolution(reviewer, at, None, f"entry {entry} is not a readable message")
    if not isinstance(message, ResolutionMessage):
        return Resolution(
            reviewer, at, None, f"entry {entry} is a {message.type}, not a resolution"
        )
    return Resolution(message.reviewer or reviewer, at, message.answer)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _resolution_label(found: Resolution) -> str:
    when = found.at.strftime("%Y-%m-%d %H:%M:%S UTC") if found.at else "at an unknown time"
    line = f"[bold green]resolved[/] by [bold]{escape(found.reviewer)}[/] {when}"
    if found.problem:
        return f"{line}\n[yellow]answer not shown: {escape(found.problem)}[/]"
    answer = json.dumps(found.answer, ensure_ascii=False, sort_keys=True)
    return f"{line}\nanswer: {escape(answer)}"


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
        tree.add(_resolution_label(resolution))
    elif resolution is not None:
        tree.add(f"[yellow]resolution: {escape(resolution)}[/]")
    return tree


def _as_json(
    row: JobRow, calls: list[CallRow], resolution: Resolution | str | None
) -> dict[str, Any]:
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
        "resolution": _resolution_json(resolution),
    }


def _resolution_json(resolution: Resolution | str | None) -> Any:
    if isinstance(resolution, Resolution):
        return {
            "reviewer": resolution.reviewer,
            "at": resolution.at.isoformat() if resolution.at else None,
            "answer": resolution.answer,
            "problem": resolution.problem,
        }
    return None if resolution is None else {"problem": resolution}


def _lookup_resolution(row: JobRow) -> Resolution | str | None:
    """Only an escalated job can have one; Redis out of reach is said, not an error."""
    if row.terminal_type != "escalation":
        return None
    client = redis.Redis.from_url(get_settings().redis_url)
    try:
        return resolution_of(client, row)
    except redis.RedisError as exc:
        return f"Redis unreachable ({type(exc).__name__}); not known whether it was resolved"
    finally:
        client.close()


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
        resolution = _lookup_resolution(row)
        if as_json:
            typer.echo(json.dumps(_as_json(row, calls, resolution), indent=2))
            return
        console.print(render(row, calls, resolution))
