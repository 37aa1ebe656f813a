"""A menu job's terminal messages, and what an escalation carries for its reviewer.

Every menu escalation (``kind="menu"``) carries, in ``context``: the ``prompt``, the rendered
``menu`` (what the model saw), the ``options`` in their JSON encoding, the ``handlers``' model
parameters (``handler_params``: so that a reviewer's pick of a handler option is validated
without the handler's code), the ``last_reply`` text, the per-attempt ``errors`` and the
``runtime``. ``worker.kinds.menus.resolution.check_menu_answer`` rebuilds the menu from these.
"""

from __future__ import annotations

import json
from typing import Any

from shared.jobs import MenuJob
from shared.menus import (
    DecisionSession,
    FunctionOption,
    Menu,
    ModelReply,
    clip,
    reply_text,
)
from shared.menus.schema_json import type_to_json
from shared.replies import EscalationMessage, EscalationReason, Receipt, ResultMessage

__all__ = [
    "LAST_REPLY_CHARS",
    "handler_params",
    "menu_context",
    "menu_escalation",
    "menu_result",
]

#: How much of the model's last reply an escalation shows the reviewer.
LAST_REPLY_CHARS = 4000


def handler_params(menu: Menu) -> dict[str, Any]:
    """Per handler option: its handler, model parameters (type encoding, required, default)."""
    out: dict[str, Any] = {}
    for option in menu.options:
        if not isinstance(option, FunctionOption):
            continue
        params = []
        for param in option.llm_params:
            entry: dict[str, Any] = {
                "name": param.name,
                "required": param.required,
                "type": type_to_json(param.spec),
            }
            if param.has_default and _is_json(param.default):
                entry["default"] = param.default
            params.append(entry)
        out[option.name] = {
            "handler": option.handler,
            "params": params,
            "accepts_extra": option.accepts_extra,
        }
    return out


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def menu_context(
    job: MenuJob,
    menu: Menu,
    *,
    runtime: str,
    model: str | None,
    session: DecisionSession | None = None,
    step: str | None = None,
) -> dict[str, Any]:
    last: ModelReply | None = session.last_reply if session is not None else None
    context: dict[str, Any] = {
        "prompt": job.prompt,
        "menu": menu.text,
        "options": job.options,
        "handler_params": handler_params(menu),
        "runtime": {"provider": runtime, "model": model},
        "last_reply": clip(reply_text(last), LAST_REPLY_CHARS) if last is not None else None,
        "errors": list(session.errors) if session is not None else [],
    }
    if last is not None:
        # The host's words, cut as the reply is: a refusal of 4,000,000 characters went whole
        # into an escalation (found by an attack).
        reason = last.finish_reason
        context["last_reply_finish_reason"] = None if reason is None else clip(reason, 64)
        if last.refusal:
            context["last_reply_refusal"] = clip(last.refusal, LAST_REPLY_CHARS)
    if step is not None:
        context["step"] = step
    return context


def menu_result(job: MenuJob, value: Any, receipts: list[Receipt]) -> ResultMessage:
    return ResultMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=receipts,
        kind="menu",
        value=value,
    )


def menu_escalation(
    job: MenuJob,
    reason: EscalationReason,
    detail: str,
    receipts: list[Receipt],
    context: dict[str, Any],
) -> EscalationMessage:
    return EscalationMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=receipts,
        kind="menu",
        reason=reason,
        detail=detail,
        context=context,
        reply_to=job.reply_to,
    )
