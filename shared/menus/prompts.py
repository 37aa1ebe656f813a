"""The messages the engine sends: the menu prompt, the work-turn prompt, the retry prompt.

- ``build_menu_prompt`` (``make``): the caller's prompt, then the menu. No finish
  instruction: the caller's own prompt tells the model to pick.
- ``build_turn_messages`` (``run_turn``): the prompt, the menu, then
  ``DECISION_FINISH_INSTRUCTION`` (work first, close with one JSON pick).
- ``build_retry_messages``: ONE user message with the task (cut to ``RETRY_PROMPT_CHARS``),
  the previous reply (cut to ``RETRY_REPLY_CHARS``, head and tail, since the pick is at the
  end), the problem (cut to ``RETRY_ERROR_CHARS``) and the re-rendered menu. It is built
  from the last reply only, so it does not grow with the number of attempts, and it offers
  no tools: the work is done, only the pick is asked for.
"""

from __future__ import annotations

from typing import Any

from shared.menus.errors import PickError
from shared.menus.menu import as_menu
from shared.menus.parse import reply_text
from shared.menus.runtime import Message

__all__ = [
    "DECISION_FINISH_INSTRUCTION",
    "REPLY_HEAD_CHARS",
    "RETRY_ERROR_CHARS",
    "RETRY_PROMPT_CHARS",
    "RETRY_REPLY_CHARS",
    "build_menu_prompt",
    "build_retry_messages",
    "build_turn_messages",
    "clip",
    "reply_head",
]

DECISION_FINISH_INSTRUCTION = (
    "Work first: reason and use the tools you need. When you are done, close your reply with "
    "exactly one JSON object that picks one option from the menu above, "
    '{"call": "<option name>", "args": {...}}, as the very last thing in your reply, '
    "with nothing after it."
)

#: How much of the previous reply a retry shows the model.
RETRY_REPLY_CHARS = 2000
#: How much of the original prompt a retry repeats.
RETRY_PROMPT_CHARS = 4000
#: How much of the problem description a retry shows.
RETRY_ERROR_CHARS = 1000
#: The head of a reply kept in errors and escalations.
REPLY_HEAD_CHARS = 500

_RETRY_CLOSE = (
    "Pick again: reply with exactly one JSON object "
    '{"call": "<option name>", "args": {...}} naming one option above, and nothing after it.'
)


def build_menu_prompt(prompt: str, options: Any) -> list[Message]:
    _check_prompt(prompt)
    return [{"role": "user", "content": f"{prompt}\n\n{as_menu(options).text}"}]


def build_turn_messages(prompt: str, options: Any | None) -> list[Message]:
    """The opening of a work turn; without options it is the plain prompt (no pick asked)."""
    _check_prompt(prompt)
    if options is None:
        return [{"role": "user", "content": prompt}]
    menu = as_menu(options)
    return [{"role": "user", "content": f"{prompt}\n\n{menu.text}\n{DECISION_FINISH_INSTRUCTION}"}]


def build_retry_messages(
    prev_reply: object, error: PickError, options: Any, *, prompt: str | None = None
) -> list[Message]:
    menu = as_menu(options)
    text = reply_text(prev_reply)
    parts = []
    if prompt:
        parts.append(f"The task was:\n{clip(prompt, RETRY_PROMPT_CHARS)}")
    shown = clip(text, RETRY_REPLY_CHARS) if text else "(no text)"
    parts.append(f"Your previous reply ({len(text)} characters):\n<<<\n{shown}\n>>>")
    parts.append(
        "It could not be used as a pick: "
        + clip(f"{error.kind}: {error.message}", RETRY_ERROR_CHARS)
    )
    parts.append(menu.text + _RETRY_CLOSE)
    return [{"role": "user", "content": "\n\n".join(parts)}]


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters: its head and tail around a marker."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2, 1)
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[... {cut} characters cut ...]\n{text[-keep:]}"


def reply_head(reply: object, limit: int = REPLY_HEAD_CHARS) -> str:
    return reply_text(reply)[:limit]


def _check_prompt(prompt: object) -> None:
    if not isinstance(prompt, str):
        raise TypeError(f"a prompt is a string, not {type(prompt).__name__}")
