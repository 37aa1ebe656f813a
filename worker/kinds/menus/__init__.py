"""Menu jobs in the worker: every model call, re-pick, tool and handler run a ledger call.

``MenuRunner`` runs a menu job (``shared.jobs.MenuJob``) for a
``worker.kinds.dispatch.Runner``, which
dispatches every job of kind ``menu`` to it; ``prepare_menu`` resolves a job against the
worker's handler registry and runtimes (or rejects it, naming each field);
``check_menu_answer`` validates a reviewer's pick for a menu escalation with the same engine.
"""

from shared.menus.messages import handler_params, menu_context, menu_escalation, menu_result
from worker.kinds.menus.base import HANDLER_PROVIDER, HANDLER_STEP
from worker.kinds.menus.menu_runner import Boundary, MenuRunner
from worker.kinds.menus.plan import MenuPlan, prepare_menu
from worker.kinds.menus.resolution import check_menu_answer, menu_of_escalation
from worker.kinds.menus.stored import reply_from_outcome, reply_outcome

__all__ = [
    "HANDLER_PROVIDER",
    "HANDLER_STEP",
    "Boundary",
    "MenuPlan",
    "MenuRunner",
    "check_menu_answer",
    "handler_params",
    "menu_context",
    "menu_escalation",
    "menu_of_escalation",
    "menu_result",
    "prepare_menu",
    "reply_from_outcome",
    "reply_outcome",
]
