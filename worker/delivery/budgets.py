"""What a delivery reserves before a paid request: its worst case, against the budgets that
cover it (``worker.ledger.budget_ops`` does the reserving, in the claim's own transaction).

- ``budget_ask``: the claim's ``BudgetAsk`` for a job's call at a provider: its batch (and
  the job's ``budget_usd``), the fleet's daily ceiling for the provider (settings), and the
  request's worst case (``ProviderRegistry.worst_cost``). None when no budget can cover it.
- ``no_maximum``: the problem of a job that carries ``budget_usd`` for a provider with no
  known maximum: it is rejected naming the field, before anything is opened or sent.
- ``exhausted_context``: the figures an escalation ``budget_exhausted`` carries.
"""

from __future__ import annotations

from typing import Any

from shared.errors import FieldProblem
from shared.jobs import AnyJob
from shared.settings import Settings
from worker.ledger import BudgetAsk, BudgetRefusal

__all__ = ["budget_ask", "exhausted_context", "no_maximum"]


def budget_ask(
    settings: Settings, job: AnyJob, provider: str, worst_usd: float | None
) -> BudgetAsk | None:
    """What the claim of ``job``'s call at ``provider`` must reserve (None: no budget can
    cover it, so nothing is reserved and nothing more is read)."""
    ceiling = settings.daily_ceiling_usd.get(provider)
    if job.batch is None and ceiling is None:
        return None
    return BudgetAsk(
        worst_usd=worst_usd,
        batch=job.batch,
        batch_budget_usd=job.budget_usd,
        daily_ceiling_usd=ceiling,
        field="budget_usd" if job.budget_usd is not None else "provider",
    )


def no_maximum(job: AnyJob, provider: str, worst_usd: float | None) -> FieldProblem | None:
    """A job with ``budget_usd`` whose request has no known maximum cannot run under it."""
    if job.budget_usd is None or worst_usd is not None:
        return None
    return FieldProblem(
        "budget_usd",
        f"provider {provider} has no known maximum price, so it cannot run under a budget: "
        f'set DECISIONS_MAX_PRICE_PER_MTOK_USD (e.g. {{"{provider}": 0.5}}), use a provider '
        "with a list price, or drop budget_usd",
    )


def exhausted_context(refusal: BudgetRefusal) -> dict[str, Any]:
    return {"budget": refusal.figures()}
