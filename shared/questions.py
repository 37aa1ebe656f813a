"""Questions in the System One shape: ``noul`` (yes/no), ``choice`` and ``score``.

The limits checked here are the wire's own (every System One host): a choice has 1 to 255
options, a score 2 to 10 levels. A provider with tighter limits (Parallel: 2 options at least)
checks them itself before sending. ``escalate_below`` and ``unsure`` are the job's routing,
never sent to a provider: ``wire()`` drops them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
)

__all__ = [
    "MAX_CHOICE_OPTIONS",
    "MAX_SCORE_LEVELS",
    "MIN_SCORE_LEVELS",
    "CalibratedFloor",
    "ChoiceQuestion",
    "Floor",
    "Instructions",
    "NoulCriteria",
    "NoulQuestion",
    "Question",
    "ScoreQuestion",
    "State",
    "fixed_floor",
]

MAX_CHOICE_OPTIONS = 255
MIN_SCORE_LEVELS = 2
MAX_SCORE_LEVELS = 10


_STATE_TYPES = (str, dict, list)


def _string_object_or_array(value: Any) -> Any:
    # A tuple, not ``str | dict | list``: that union would be built anew on every call.
    if not isinstance(value, _STATE_TYPES):
        raise ValueError(f"must be a string, an object or an array, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__
    )


#: A state is a string, an object or an array; numbers, booleans and null are rejected.
State = Annotated[
    str | dict[str, Any] | list[Any],
    PlainValidator(
        _string_object_or_array, json_schema_input_type=str | dict[str, Any] | list[Any]
    ),
]
Instructions = Annotated[
    str | dict[str, Any] | list[Any],
    PlainValidator(
        _string_object_or_array, json_schema_input_type=str | dict[str, Any] | list[Any]
    ),
]

_ROUTING_FIELDS = {"escalate_below"}


class CalibratedFloor(BaseModel):
    """``escalate_below`` as a target: the threshold ``decisions calibration`` suggests for
    this question id and type, provider and model to reach ``calibrated`` accuracy on the
    results that do not escalate, once enough labels exist; ``fallback`` until then."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    calibrated: float = Field(
        ..., gt=0.0, lt=1.0, description="the target accuracy of the non-escalated answers"
    )
    fallback: float = Field(
        ..., ge=0.0, le=1.0, description="the floor used while the labels are too few"
    )


_FLOOR_FORMS = 'a number from 0 to 1, or {"calibrated": target accuracy, "fallback": number}'


def _floor(value: Any) -> float | CalibratedFloor:
    # One message naming the field's two forms, not pydantic's one per union member.
    if isinstance(value, CalibratedFloor):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{value} is outside 0 to 1; {_FLOOR_FORMS}")
        return float(value)
    if isinstance(value, dict):
        try:
            return CalibratedFloor.model_validate(value)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ValueError(f"{where}: {problem['msg']}; {_FLOOR_FORMS}") from None
    raise ValueError(_FLOOR_FORMS)


#: A fixed confidence floor, or a calibrated one.
Floor = Annotated[
    Annotated[float, Field(ge=0.0, le=1.0)] | CalibratedFloor,
    BeforeValidator(_floor),
]


def fixed_floor(floor: Floor | dict[str, Any] | None) -> float | None:
    """The number a floor means without labels: itself, or a calibrated floor's fallback
    (also as a question's JSON, as an escalation's context carries it)."""
    if isinstance(floor, CalibratedFloor):
        return floor.fallback
    if isinstance(floor, dict):
        fallback = floor.get("fallback")
        return float(fallback) if isinstance(fallback, int | float) else None
    return floor


class _QuestionBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instructions: Instructions
    escalate_below: Floor | None = Field(
        None,
        description="a confidence below this escalates low_confidence; or "
        '{"calibrated": target accuracy, "fallback": floor}',
    )

    @field_validator("instructions")
    @classmethod
    def _instructions_not_empty(cls, value: Instructions) -> Instructions:
        if isinstance(value, str) and not value.strip():
            raise ValueError("instructions must not be empty")
        return value

    def wire(self) -> dict[str, Any]:
        """The question as a System One host takes it (no routing fields, no nulls added)."""
        return self.model_dump(mode="json", exclude=_ROUTING_FIELDS, exclude_none=True)


class NoulCriteria(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    true: str | None = None
    false: str | None = None


class NoulQuestion(_QuestionBase):
    type: Literal["noul"] = "noul"
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_QuestionBase):
    type: Literal["choice"] = "choice"
    criteria: dict[str, str | None] = Field(
        ..., description=f"option -> description (or null), 1 to {MAX_CHOICE_OPTIONS} options"
    )

    @field_validator("criteria")
    @classmethod
    def _options_in_range(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        if not value:
            raise ValueError("a choice needs at least one option")
        if len(value) > MAX_CHOICE_OPTIONS:
            raise ValueError(f"{len(value)} options; at most {MAX_CHOICE_OPTIONS} are allowed")
        if any(not name.strip() for name in value):
            raise ValueError("option names must not be empty")
        return value

    def wire(self) -> dict[str, Any]:
        # Null descriptions are part of the contract ("sales": null), so keep them.
        out = super().wire()
        out["criteria"] = dict(self.criteria)
        return out


class ScoreQuestion(_QuestionBase):
    type: Literal["score"] = "score"
    criteria: list[str] = Field(..., description="ordered levels, lowest first, 2 to 10")

    @field_validator("criteria")
    @classmethod
    def _levels_in_range(cls, value: list[str]) -> list[str]:
        if not MIN_SCORE_LEVELS <= len(value) <= MAX_SCORE_LEVELS:
            given = f"{len(value)} level" + ("" if len(value) == 1 else "s")
            raise ValueError(f"{given}; a score takes {MIN_SCORE_LEVELS} to {MAX_SCORE_LEVELS}")
        return value


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]
