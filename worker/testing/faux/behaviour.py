"""How the faux misbehaves, as data: set at start, replaced at run time.

``FauxBehaviour`` is frozen; the provider swaps whole values (``PUT /_faux/behaviour``), so a
request always sees one consistent behaviour. ``overrides`` maps a call key (the
``X-Decisions-Call`` header) to the behaviour for that call alone, so one job's request can
misbehave while the others are answered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["CONNECTION_MODES", "DEFAULT_STATUS_CODE", "FauxBehaviour", "FauxMode"]

DEFAULT_STATUS_CODE = 500

FauxMode = Literal[
    "ok",
    "refuse",
    "rate_limit",
    "status",
    "drop_before_read",
    "drop_after_read",
    "reset_after_read",
    "garbage",
    "deep_json",
    "bad_probabilities",
]

#: Modes that end the connection instead of answering.
CONNECTION_MODES: frozenset[FauxMode] = frozenset(
    {"drop_before_read", "drop_after_read", "reset_after_read"}
)


class FauxBehaviour(BaseModel):
    """What the faux does with the next decision requests.

    - ``latency_ms``: waited before answering (or before dropping after read).
    - ``mode``: ``ok``; ``refuse`` (every question, or those in ``refuse_questions``);
      ``rate_limit`` (429, with ``Retry-After: retry_after_s`` when set); ``status``
      (``status_code`` in the flavour's error envelope; ``Retry-After`` too when set);
      ``drop_before_read`` / ``drop_after_read`` (close, never answer); ``reset_after_read``
      (RST); ``garbage`` (200, not JSON); ``deep_json`` (200, JSON nested 100,000 levels
      deep: deeper than Python's parser can go); ``bad_probabilities`` (200, sums of 0.7).
    - ``fail_first``: apply ``mode`` to the first N requests only, then answer ``ok``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_ms: float = Field(default=0.0, ge=0.0)
    mode: FauxMode = "ok"
    refuse_questions: tuple[str, ...] = ()
    retry_after_s: float | None = Field(default=None, ge=0.0)
    #: ``None`` is ``DEFAULT_STATUS_CODE`` (so a CLI can pass its unset option through).
    status_code: int | None = Field(default=None, ge=400, le=599)
    fail_first: int | None = Field(default=None, ge=0)
    overrides: dict[str, FauxBehaviour] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _overrides_are_flat(self) -> FauxBehaviour:
        if any(o.overrides for o in self.overrides.values()):
            raise ValueError("an override cannot have overrides of its own")
        return self

    @property
    def status(self) -> int:
        """The status ``mode="status"`` answers with."""
        return self.status_code or DEFAULT_STATUS_CODE

    @property
    def latency_s(self) -> float:
        return self.latency_ms / 1000.0

    def for_call(self, call_key: str | None) -> FauxBehaviour:
        """The behaviour a request with ``call_key`` gets (its override, else this)."""
        if call_key is None or not self.overrides:
            return self
        return self.overrides.get(call_key, self)
