"""The at-most-once delivery protocol and job lifecycle that every job kind runs on."""

from worker.delivery.budgets import budget_ask, exhausted_context, no_maximum
from worker.delivery.calls import CLAIM_POLL_S, CallProtocol
from worker.delivery.ledger_io import LedgerIO
from worker.delivery.lifecycle import JobLifecycle, TerminalMessage
from worker.delivery.outbox import Outbox
from worker.delivery.protocol import Delivery
from worker.delivery.records import (
    CALL_STATUS,
    LostCost,
    SentCall,
    answers_json_of,
    bare_receipt,
    call_status,
    failure_reason,
    lost_cost,
    outcome_of,
    stored_answers,
    stored_outcome,
    stored_receipt,
    unreadable,
)
from worker.delivery.stats import DeliveryStats

__all__ = [
    "CALL_STATUS",
    "CLAIM_POLL_S",
    "CallProtocol",
    "Delivery",
    "DeliveryStats",
    "JobLifecycle",
    "LedgerIO",
    "LostCost",
    "Outbox",
    "SentCall",
    "TerminalMessage",
    "answers_json_of",
    "bare_receipt",
    "budget_ask",
    "call_status",
    "exhausted_context",
    "failure_reason",
    "lost_cost",
    "no_maximum",
    "outcome_of",
    "stored_answers",
    "stored_outcome",
    "stored_receipt",
    "unreadable",
]
