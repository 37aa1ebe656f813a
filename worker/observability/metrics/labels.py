"""Label values from closed sets: anything else becomes ``other``.

A label value comes from a job (its ``kind``, its ``provider``), from a provider's answer or
from a message; one hostile raw message must not add a series (each costs memory in every
worker and in Prometheus), nor put its text (a 5,000-character kind, a token) on the metrics
endpoint. Each label has an allowlist: the job kinds, the reply types, the escalation
reasons, the ledger's call statuses, the cost bases, and the providers and runtimes this
worker is configured with (built-ins plus the hosts its settings name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, get_args

from shared.jobs import JOB_KINDS
from shared.replies import TERMINAL_TYPES, EscalationReason
from shared.settings import Settings
from worker.ledger import CALL_STATUSES

__all__ = [
    "BASES",
    "BUILTIN_PROVIDERS",
    "KINDS",
    "OTHER",
    "OUTCOMES",
    "REASONS",
    "STATUSES",
    "Labels",
]

#: What every value outside a label's allowlist becomes.
OTHER: Final = "other"
#: The providers (``worker.providers.registry``) and chat runtimes (``worker.runtimes``)
#: every worker has; tests/fleet/test_metric_labels.py keeps this in step with both.
BUILTIN_PROVIDERS: Final = frozenset({"faux", "openrouter", "typesafe", "parallel", "openai"})
#: Job kinds; ``unknown`` is a rejected message that named none.
KINDS: Final = frozenset(JOB_KINDS) | {"unknown"}
#: Terminal reply types; ``-`` is a packed job whose row holds none.
OUTCOMES: Final = frozenset(TERMINAL_TYPES) | {"-"}
#: Escalation reasons; ``""`` is a job that ended without one (a result, a rejection).
REASONS: Final = frozenset(get_args(EscalationReason)) | {""}
STATUSES: Final = frozenset(CALL_STATUSES)
BASES: Final = frozenset({"reported", "estimate", "unknown"})


def _fold(value: object, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else OTHER


@dataclass(frozen=True)
class Labels:
    """The allowlists of one worker; ``providers`` grows with the hosts its settings name."""

    #: ``-``: a rejected job, which reached no provider.
    providers: frozenset[str] = field(default=BUILTIN_PROVIDERS | {"-"})

    @classmethod
    def from_settings(cls, settings: Settings) -> Labels:
        hosts = set(settings.systemone_hosts) | set(settings.chat_hosts)
        return cls(BUILTIN_PROVIDERS | {"-"} | hosts)

    def provider(self, name: object) -> str:
        return _fold(name, self.providers)

    @staticmethod
    def kind(value: object) -> str:
        return _fold(value, KINDS)

    @staticmethod
    def outcome(value: object) -> str:
        return _fold(value, OUTCOMES)

    @staticmethod
    def reason(value: object) -> str:
        return _fold("" if value is None else value, REASONS)

    @staticmethod
    def status(value: object) -> str:
        return _fold(value, STATUSES)

    @staticmethod
    def basis(value: object) -> str:
        return _fold(value, BASES)
