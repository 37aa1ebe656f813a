"""The menu engine's own errors, below ``shared.errors.DecisionWorkerError``.

``PickError`` is one model reply that could not be used as a pick. It is what the retry
loop catches and feeds back to the model; it never escapes ``make``/``run_turn`` (they turn
the last one into ``shared.errors.DecisionError``). The worker, which drives the engine
itself, catches it the same way.

``MenuSpecInvalid`` is a menu or schema encoding from the wire that does not decode; it
names the JSON path, so the worker can reject the job field by field. Errors in the Python
notation written by a programmer are plain ``TypeError`` (wrong shape or type) and
``ValueError`` (empty, duplicate, out of range), like Python's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.errors import DecisionWorkerError

__all__ = ["PICK_ERROR_KINDS", "MenuSpecInvalid", "PickError", "PickErrorKind", "Problem"]

PickErrorKind = Literal[
    "no_action",
    "unknown_call",
    "bad_args",
    "missing_required",
    "type_mismatch",
    "enum_violation",
    "refusal",
    "truncated",
]
PICK_ERROR_KINDS: tuple[PickErrorKind, ...] = (
    "no_action",
    "unknown_call",
    "bad_args",
    "missing_required",
    "type_mismatch",
    "enum_violation",
    "refusal",
    "truncated",
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a pick, at a field path such as ``steps[0].action``."""

    kind: PickErrorKind
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PickError(DecisionWorkerError):
    """A model reply that is not a usable pick. ``kind`` and ``path`` are the first problem's."""

    def __init__(
        self,
        kind: PickErrorKind,
        message: str,
        *,
        path: str = "",
        problems: tuple[Problem, ...] = (),
    ) -> None:
        self.kind: PickErrorKind = kind
        self.message = message
        self.path = path
        self.problems = problems or (Problem(kind, path, message),)
        super().__init__(f"{kind}: {message}")

    @classmethod
    def from_problems(cls, problems: list[Problem]) -> PickError:
        first = problems[0]
        return cls(
            first.kind,
            "; ".join(str(p) for p in problems),
            path=first.path,
            problems=tuple(problems),
        )


class MenuSpecInvalid(DecisionWorkerError, ValueError):
    """A menu or schema encoding does not decode; ``path`` is where, in JSON-path style."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{path or '(root)'}: {detail}")
