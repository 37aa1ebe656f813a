"""The reviewer console: a small server-rendered web app over the escalation queue and ledger.

``create_app(settings)`` builds it (``decisions console`` serves it with uvicorn). Pages:
``/escalations`` (open ones, filterable, oldest first; opening one claims it, its form is
built from the question types or the menu's options and checked by the same code as
``decisions escalations resolve``), ``/batches`` (progress, outcomes, cost, unknown calls,
stragglers, an SVG chart). Modules: ``auth`` (logins, Argon2), ``csrf``, ``headers``
(CSP and friends), ``web`` (guards and rendering), ``decide_form`` / ``menu_form``,
``state_view`` (untrusted states shown safely), ``figures`` / ``chart`` (batches),
``estimates`` (the dry-run seam), ``*_views`` (the pages), ``app``.
"""

from worker.console.app import create_app, menu_checker
from worker.console.auth import Login, Users, hash_password
from worker.console.estimates import Estimate, EstimateSource, NoEstimates

__all__ = [
    "Estimate",
    "EstimateSource",
    "Login",
    "NoEstimates",
    "Users",
    "create_app",
    "hash_password",
    "menu_checker",
]
