"""Batch judgments beyond single questions: sift, route, verify (the job fields, the wire
questions they become, and how many questions fit in one request).

The job classes are ``shared.jobs.SiftJob``, ``shared.jobs.RouteJob`` and
``shared.jobs.DecideJob`` (its ``verify``); this ``__init__`` never imports ``shared.jobs``,
which imports it. The terminal-message builders (``shared.judgments.sift``, ``route``,
``verify``, from ``steps``' results) do, and are imported by their own names.
"""

from shared.judgments.kinds import JUDGMENT_KINDS, wants_verification
from shared.judgments.packing import (
    PARALLEL_PACK_LIMITS,
    SYSTEM_ONE_CONTEXT_TOKENS,
    SYSTEM_ONE_PACK_LIMITS,
    SYSTEM_ONE_REQUEST_TOKENS,
    PackLimits,
    pack,
    pack_limits_for,
)
from shared.judgments.requests import (
    ROUTE_QUESTION_ID,
    SIFT_DEFAULT_STATE,
    item_id,
    item_index,
    route_question,
    sift_question,
    sift_state,
)
from shared.judgments.specs import (
    DEFAULT_ROUTE_INSTRUCTIONS,
    HIGH_STAKES_VERIFY_COUNT,
    MAX_SIFT_ITEMS,
    MAX_VERIFY_COUNT,
    RouteFields,
    SiftFields,
    SiftItemValue,
    VerifySpec,
)

__all__ = [
    "DEFAULT_ROUTE_INSTRUCTIONS",
    "HIGH_STAKES_VERIFY_COUNT",
    "JUDGMENT_KINDS",
    "MAX_SIFT_ITEMS",
    "MAX_VERIFY_COUNT",
    "PARALLEL_PACK_LIMITS",
    "ROUTE_QUESTION_ID",
    "SIFT_DEFAULT_STATE",
    "SYSTEM_ONE_CONTEXT_TOKENS",
    "SYSTEM_ONE_PACK_LIMITS",
    "SYSTEM_ONE_REQUEST_TOKENS",
    "PackLimits",
    "RouteFields",
    "SiftFields",
    "SiftItemValue",
    "VerifySpec",
    "item_id",
    "item_index",
    "pack",
    "pack_limits_for",
    "route_question",
    "sift_question",
    "sift_state",
    "wants_verification",
]
