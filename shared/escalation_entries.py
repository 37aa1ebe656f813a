"""An escalation as a reviewer reads it: one entry of the escalation stream, parsed.

``decode_entry`` reads an entry's message and the reply stream its resolution goes to. An
entry that does not parse (a field a newer version adds, a damaged message) or that no
reviewer could answer (not an escalation, no reply stream) is skipped and reported to a
``SkipReporter`` with why, never an error for every reviewer: one bad entry must not stop
the queue. That includes an escalation no answer could be checked against
(``shared.resolutions.answer_problem``: questions that cannot be read, a menu that cannot be
rebuilt): the console lists it as unreadable, and the queue's claim used to hand it to a
reviewer who could then neither see a form for it nor resolve it, nor give it to anyone who
could. ``OpenEscalation`` is an entry still open in
``shared.escalations``' queue.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from shared import keys
from shared.replies import EscalationMessage, parse_reply
from shared.resolutions import answer_problem

__all__ = ["OpenEscalation", "SkipReporter", "decode_entry", "is_entry_id"]

#: A stream entry id as Redis takes it: ASCII digits only (``\d`` alone takes Arabic-Indic
#: ones too), milliseconds and a sequence number, each a 64-bit unsigned number; the
#: sequence may be left out where a position is meant (``--after``).
_ENTRY_ID: Final = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?", re.ASCII)
_ID_PART_MAX: Final = 2**64 - 1


def is_entry_id(text: str, *, position: bool = False) -> bool:
    """Whether Redis takes ``text`` as an entry's id (``position``: or as a position, the
    milliseconds alone). Any other, Redis refuses with an error of its own ("Invalid stream
    ID"), which a typed id must not become (found by attacks: a 500 page, a CLI line in
    Redis's words)."""
    if not _ENTRY_ID.fullmatch(text) or ("-" not in text and not position):
        return False
    return all(int(part) <= _ID_PART_MAX for part in text.split("-"))

#: Told of each escalation entry a reader skipped: its id and why.
SkipReporter = Callable[[str, str], None]


@dataclass(frozen=True)
class OpenEscalation:
    """An escalation still open: who holds it (None: waiting) and for how long."""

    entry_id: str
    message: EscalationMessage
    reply_to: str
    holder: str | None
    idle_s: float

    @property
    def age_s(self) -> float:
        return (datetime.now(UTC) - self.message.created_at).total_seconds()


def decode_entry(
    entry_id: str, rows: Any, on_skip: SkipReporter
) -> tuple[EscalationMessage, str] | None:
    """An escalation entry's message and reply stream name (``rows``: its XRANGE answer);
    None, reported to ``on_skip``, if it has none that a reviewer could answer (None
    unreported if ``rows`` is empty: the caller knows why)."""
    if not rows:
        return None
    fields = {_text(k): _text(v) for k, v in rows[0][1].items()}
    try:
        message = parse_reply(fields["message"])
    except KeyError:
        on_skip(entry_id, "it has no message field")
        return None
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in problem["loc"]) or "(message)"
        on_skip(entry_id, f"its message does not parse: {where}: {problem['msg']}")
        return None
    except ValueError:
        on_skip(entry_id, "its message is not JSON")
        return None
    if not isinstance(message, EscalationMessage):
        on_skip(entry_id, f"it holds a {message.type}, not an escalation")
        return None
    reply_to = fields.get("reply_to") or message.reply_to or ""
    if not keys.is_reply_name(reply_to):
        on_skip(entry_id, f"its reply_to {reply_to[:80]!r} is not a stream name")
        return None
    try:
        unanswerable = answer_problem(message)
    except Exception as exc:  # one entry's shape must never stop the queue for every reader
        unanswerable = f"it cannot be read ({type(exc).__name__})"
    if unanswerable is not None:
        on_skip(entry_id, unanswerable)
        return None
    return message, reply_to


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
