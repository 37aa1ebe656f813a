"""What a job says about sift, route and verify: the fields, checked in full at parse time.

The job classes themselves (``SiftJob``, ``RouteJob``, and ``DecideJob.verify``) live in
``shared.jobs``, on the common envelope; the fields here are mixed in, so that ``shared.jobs``
can import this module without a cycle.

- ``sift``: ``items`` (strings, objects or arrays) and one yes/no ``question`` applied to
  each item, with an optional shared ``state``. An item is kept when p(yes) >= 0.5.
- ``route``: a choice over named ``routes`` about a ``state``; a refusal or a confidence below
  ``floor`` takes the ``unsure`` route when one is named (instead of escalating), and the
  reply's ``route_reason`` says which. A lost call (unknown outcome) escalates
  ``decision_interrupted`` either way.
- ``verify`` (on a decide job): ``count`` more decisions (1 to 4; default 1, or 2 with
  ``stakes: "high"``) on the same questions from the ``provider``/``model`` named here.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, field_validator, model_validator

from shared.ledger_text import LedgerText
from shared.questions import (
    MAX_CHOICE_OPTIONS,
    CalibratedFloor,
    Instructions,
    NoulQuestion,
    State,
)

__all__ = [
    "DEFAULT_ROUTE_INSTRUCTIONS",
    "HIGH_STAKES_VERIFY_COUNT",
    "MAX_SIFT_ITEMS",
    "MAX_VERIFY_COUNT",
    "RouteFields",
    "SiftFields",
    "SiftItemValue",
    "VerifySpec",
]

#: Items a sift job may carry (each is one question on the wire).
MAX_SIFT_ITEMS: Final = 10_000
#: Verifying decisions a decide job may ask for.
MAX_VERIFY_COUNT: Final = 4
#: Verifying decisions of a ``stakes: "high"`` verification that names no count.
HIGH_STAKES_VERIFY_COUNT: Final = 2
#: The question a route job asks when it gives no ``instructions`` of its own.
DEFAULT_ROUTE_INSTRUCTIONS: Final = "Which of these routes fits best?"


def _item(value: Any) -> Any:
    if not isinstance(value, str | dict | list):
        raise ValueError("an item is a string, an object or an array")
    if isinstance(value, str) and not value.strip():
        raise ValueError("an item must not be empty")
    return value


#: One item of a sift job: a string, an object or an array (never empty, never null).
SiftItemValue = Annotated[
    str | dict[str, Any] | list[Any],
    PlainValidator(_item, json_schema_input_type=str | dict[str, Any] | list[Any]),
]


class VerifySpec(BaseModel):
    """Independent decisions that must agree with the first one before a result stands."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int | None = Field(
        None, ge=1, le=MAX_VERIFY_COUNT,
        description=f"verifying decisions, 1 to {MAX_VERIFY_COUNT} (default 1; 2 at high stakes)",
    )
    # Kept in the ledger's calls: no control characters (``shared.ledger_text``).
    provider: LedgerText | None = Field(
        None, min_length=1, description="default: the job's provider"
    )
    model: LedgerText | None = Field(None, min_length=1, description="default: the provider's")
    stakes: Literal["normal", "high"] = "normal"

    @model_validator(mode="after")
    def _names_another(self) -> VerifySpec:
        # Whether it is really another (provider, model) than the decision's is checked by
        # the worker, which knows the defaults; with neither named it cannot be.
        if self.provider is None and self.model is None:
            raise ValueError("a verification names another provider or model")
        return self

    @property
    def verifications(self) -> int:
        """How many verifying decisions are made."""
        if self.count is not None:
            return self.count
        return HIGH_STAKES_VERIFY_COUNT if self.stakes == "high" else 1


class _Provided(BaseModel):
    # Kept in the ledger's calls: no control characters (``shared.ledger_text``).
    provider: LedgerText | None = Field(None, min_length=1, description="default from settings")
    model: LedgerText | None = Field(None, min_length=1, description="default from the provider")


class SiftFields(_Provided):
    """A list of items and one yes/no question applied to each (``kind: "sift"``)."""

    items: list[SiftItemValue] = Field(..., min_length=1, max_length=MAX_SIFT_ITEMS)
    question: NoulQuestion = Field(..., description="a noul question, asked of every item")
    state: State | None = Field(None, description="context shared by every item")

    @field_validator("state")
    @classmethod
    def _state_not_empty(cls, value: State | None) -> State | None:
        if isinstance(value, str) and not value.strip():
            raise ValueError("state must not be empty")
        return value

    @field_validator("question")
    @classmethod
    def _fixed_floor(cls, value: NoulQuestion) -> NoulQuestion:
        # A sift's items are not labelled one by one (yet): its floor is a number.
        if isinstance(value.escalate_below, CalibratedFloor):
            raise ValueError(
                "escalate_below: a sift's floor is a number from 0 to 1; calibrated floors "
                "are for decide jobs' questions"
            )
        return value


class RouteFields(_Provided):
    """A choice over named routes with an optional ``unsure`` branch (``kind: "route"``)."""

    state: State
    routes: dict[str, str | None] = Field(
        ..., description=f"route -> description (or null), 1 to {MAX_CHOICE_OPTIONS} routes"
    )
    instructions: Instructions = DEFAULT_ROUTE_INSTRUCTIONS
    unsure: str | None = Field(
        None, min_length=1,
        description="taken on a refusal or a confidence below the floor (a lost call escalates); "
        "a route of its own, or one of ``routes``",
    )
    floor: float | None = Field(None, ge=0.0, le=1.0, description="lowest confidence accepted")

    @field_validator("routes")
    @classmethod
    def _routes_in_range(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        if not value:
            raise ValueError("a route job needs at least one route")
        if len(value) > MAX_CHOICE_OPTIONS:
            raise ValueError(f"{len(value)} routes; at most {MAX_CHOICE_OPTIONS} are allowed")
        if any(not name.strip() for name in value):
            raise ValueError("route names must not be empty")
        return value

    @field_validator("state", "instructions")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty")
        return value
