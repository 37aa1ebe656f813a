"""The worker side of sift, route and verify: plans and ledger calls (their terminal
messages are built by the pure ``shared.judgments.sift``, ``route`` and ``verify``)."""

from worker.kinds.judgments.check import judgment_checker, plan_problems
from worker.kinds.judgments.judgment_runner import JudgmentRunner
from worker.kinds.judgments.plan import (
    PlannedCall,
    VerifiedPlan,
    pack_limits,
    plan_route,
    plan_sift,
    plan_verified,
)

__all__ = [
    "JudgmentRunner",
    "PlannedCall",
    "VerifiedPlan",
    "judgment_checker",
    "pack_limits",
    "plan_problems",
    "plan_route",
    "plan_sift",
    "plan_verified",
]
