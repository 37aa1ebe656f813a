"""A harness around a real ``Runner`` + ``MenuRunner``: SQLite ledger, in-process faux (its
chat endpoint scriptable and counting per call key), memory sink, and crashes on demand.

A *crash* is ``Crash`` (a ``BaseException``, so no ``except Exception`` of the runner stops
it) raised at one step boundary, as ``kill -9`` would end the process there: whatever was
committed stays, nothing else happens. ``expire_leases`` then lets time pass beyond the dead
delivery's leases, as a redelivery after the broker's visibility timeout sees them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from shared.replies import Reply, parse_reply
from shared.settings import Settings
from tests.support.runners import faux_runner
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.kinds.menus import MenuRunner
from worker.kinds.menus.handlers import load_handlers
from worker.ledger import Ledger
from worker.ledger.models import calls, jobs
from worker.runtimes import RuntimeRegistry
from worker.testing.faux import FauxChatBehaviour, FauxChatReply, FauxProvider

__all__ = [
    "OPTIONS",
    "REPLY_TO",
    "Crash",
    "Harness",
    "menu_job",
]

REPLY_TO = "menus-test:replies"
HANDLERS_MODULE = "tests.menus_worker.handlers"

#: A ticket menu in the queue encoding: two handlers, a value and a nested schema option.
OPTIONS: list[dict[str, Any]] = [
    {"kind": "handler", "name": "refund", "handler": "t_refund"},
    {"kind": "handler", "name": "escalate", "handler": "t_escalate"},
    {"kind": "value", "name": "close", "value": {"status": "closed"}, "description": "Solved."},
    {
        "kind": "schema",
        "name": "plan",
        "description": "Produce a plan.",
        "schema": {
            "type": "object",
            "fields": [
                {
                    "name": "steps",
                    "type": "list",
                    "items": {
                        "type": "object",
                        "fields": [
                            {"name": "action", "type": "str", "options": ["email", "call"]},
                            {"name": "target", "type": "str"},
                        ],
                    },
                }
            ],
        },
    },
]


def menu_job(job_id: str, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "kind": "menu",
        "reply_to": REPLY_TO,
        "batch": "menus-test",
        "prompt": f"Route ticket {job_id}: the parcel never arrived. Pick one option.",
        "options": OPTIONS,
        "context": {"customer": "Ana"},
    }
    job.update(fields)
    return job


class Crash(BaseException):
    """The worker died here."""


@dataclass
class Harness:
    settings: Settings
    ledger: Ledger
    faux: FauxProvider
    sink: MemorySink
    runner: Runner
    menus: MenuRunner
    crash_at: tuple[str, str] | None = None
    boundaries: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def create(cls, tmp_path: Path, **settings: Any) -> Harness:
        config = Settings(
            _env_file=None,
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
            faux_url=None,
            **settings,
        )
        ledger = Ledger.from_settings(config)
        ledger.migrate()
        runner, faux, sink = faux_runner(config, ledger)
        runtimes = RuntimeRegistry.from_settings(config, faux_transport=faux.transport())
        harness = cls(config, ledger, faux, sink, runner, None)  # type: ignore[arg-type]
        harness.menus = MenuRunner(
            runner.delivery,
            handlers=load_handlers([HANDLERS_MODULE]),
            runtimes=runtimes,
            on_boundary=harness._boundary,
        )
        runner.menus = harness.menus
        return harness

    # --- running -----------------------------------------------------------------------

    def _boundary(self, point: str, job_id: str, step: str) -> None:
        self.boundaries.append((point, step))
        if self.crash_at == (point, step):
            self.crash_at = None
            raise Crash(f"{point} {step}")

    async def run(self, job: Any) -> str:
        return await self.runner.run_one(job)

    async def crash_then_run(self, job: dict[str, Any], point: str, step: str) -> str:
        """Run ``job`` until it dies at ``(point, step)``; then deliver it again."""
        self.crash_at = (point, step)
        try:
            await self.run(job)
        except Crash:
            pass
        else:
            raise AssertionError(f"the run never reached {point} {step}: {self.boundaries}")
        self.expire_leases(job["id"])
        return await self.run(job)

    def expire_leases(self, job_id: str) -> None:
        """Time passes: every claim of ``job_id`` still held is past its lease."""
        past = datetime.now(UTC) - timedelta(seconds=1)
        with self.ledger.engine.begin() as conn:
            conn.execute(
                sa.update(calls)
                .where((calls.c.job_id == job_id) & (calls.c.status == "claimed"))
                .values(lease_expires=past)
            )

    def pass_deadline(self, job_id: str) -> None:
        """Time passes: the job's deadline (as the ledger keeps it) is behind us."""
        past = datetime.now(UTC) - timedelta(seconds=1)
        with self.ledger.engine.begin() as conn:
            conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(deadline=past))

    # --- scripting the model -------------------------------------------------------------

    def reply(self, job_id: str, step: str, reply: FauxChatReply) -> None:
        """What the model answers for ``step`` of ``job_id`` (every time it is asked)."""
        by_call = dict(self.faux.chat.behaviour.by_call)
        by_call[f"{job_id}/{step}"] = reply
        self.faux.chat.update_behaviour(by_call=by_call)

    def pick(self, job_id: str, step: str, option: str, args: dict[str, Any] | None = None) -> None:
        self.reply(job_id, step, FauxChatReply(pick=option, args=args))

    def script(self, behaviour: FauxChatBehaviour) -> None:
        self.faux.chat.set_behaviour(behaviour)

    # --- what happened ----------------------------------------------------------------------

    def model_calls(self, job_id: str) -> dict[str, int]:
        """Requests the faux received, by step, for ``job_id``."""
        prefix = f"{job_id}/"
        return {
            key.removeprefix(prefix): n
            for key, n in self.faux.calls().items()
            if key.startswith(prefix)
        }

    def published(self, job_id: str) -> list[Reply]:
        return [parse_reply(m.message) for m in self.sink.snapshot() if m.job_id == job_id]

    def terminal(self, job_id: str) -> Reply:
        messages = self.published(job_id)
        assert len(messages) == 1, messages
        return messages[0]

    def call_statuses(self, job_id: str) -> dict[str, str]:
        return {c.step: c.status for c in self.ledger.calls(job_id)}

    def stored(self, job_id: str, step: str) -> dict[str, Any]:
        call = self.ledger.get_call(job_id, step)
        assert call is not None and call.outcome_json
        value = json.loads(call.outcome_json)
        assert isinstance(value, dict)
        return value
