"""The worker side of sift, route and verify: plans, ledger calls and terminal messages."""

from worker.judgments.check import judgment_checker, plan_problems
from worker.judgments.plan import (
    PlannedCall,
    VerifiedPlan,
    pack_limits,
    plan_route,
    plan_sift,
    plan_verified,
)
from worker.judgments.runner import JudgmentRunner

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
