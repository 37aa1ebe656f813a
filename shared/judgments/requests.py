"""The questions a sift or route job puts on the wire (System One shape), and their ids.

A sift item is one ``noul`` question of a request::

    "item.<i>": {"type": "noul",
                 "instructions": {"question": <the job's instructions>, "item": <items[i]>},
                 "criteria": <the job's criteria, when it has any>}

``i`` is the item's index in the job's ``items``; ids are the caller's and never shown to the
model, so the item travels in the instructions (an object: System One takes a string, an
object or an array there; OpenAI Decisions gets its canonical JSON text). The request's
``state`` is the job's ``state``, or ``SIFT_DEFAULT_STATE`` when it has none (a state is
required on the wire).

A route is one ``choice`` question, ``"route": {"type": "choice", "instructions": ...,
"criteria": <routes>}``, about the job's state.
"""

from __future__ import annotations

from typing import Any, Final

from shared.questions import ChoiceQuestion, NoulQuestion

__all__ = [
    "ROUTE_QUESTION_ID",
    "SIFT_DEFAULT_STATE",
    "item_id",
    "item_index",
    "route_question",
    "sift_question",
    "sift_state",
]

#: The state of a sift request whose job gives none.
SIFT_DEFAULT_STATE: Final = "Answer each question about the item it carries, on its own."
ROUTE_QUESTION_ID: Final = "route"
_ITEM_PREFIX: Final = "item."


def item_id(index: int) -> str:
    return f"{_ITEM_PREFIX}{index}"


def item_index(question_id: str) -> int | None:
    """The item index of ``item.<i>``; None for any other id."""
    if not question_id.startswith(_ITEM_PREFIX):
        return None
    tail = question_id[len(_ITEM_PREFIX):]
    return int(tail) if tail.isdigit() else None


def sift_state(state: Any) -> Any:
    return SIFT_DEFAULT_STATE if state is None else state


def sift_question(question: NoulQuestion, item: Any) -> dict[str, Any]:
    """One item's question as it is sent (no routing fields)."""
    wire = question.wire()
    wire["instructions"] = {"question": question.instructions, "item": item}
    return wire


def route_question(routes: dict[str, str | None], instructions: Any) -> ChoiceQuestion:
    return ChoiceQuestion(instructions=instructions, criteria=dict(routes))
