"""What a provider failure means for the ledger: the call state the runner records.

=====================  ============  =====================================================
error code             call status   why
=====================  ============  =====================================================
``outcome_unknown``    ``unknown``   the request may have been received (408, 5xx, lost
                                     after sending, deadline or cancel in flight): terminal,
                                     escalated ``decision_interrupted``, never sent again
``auth``               ``failed``    the server answered and refused (401/403)
``invalid_request``    ``failed``    refused by the server (4xx), or by our own checks
                                     before the paid request (the catalog says the model
                                     takes no images); sending again would not help
``invalid_response``   ``failed``    answered and paid, but the answer does not fit
``rate_limited``       ``not_sent``  429: the provider did not process it
``connection``         ``not_sent``  it provably never reached the provider
``timeout``            ``not_sent``  the deadline ran out with nothing in flight
``aborted``            ``not_sent``  the host cancelled with nothing in flight
``configuration``      ``not_sent``  no key, a bad URL, a redirect: nothing was processed
=====================  ============  =====================================================

Limits, model and image-placement checks happen in ``prepare``, before the ledger claims
the call; those ``invalid_request`` errors never reach a ledger row (the job is rejected).
"""

from __future__ import annotations

from typing import Final

from shared.errors import DecisionProviderError, ProviderErrorCode
from shared.replies import CallStatus

__all__ = ["CALL_STATUS", "call_status"]

CALL_STATUS: Final[dict[ProviderErrorCode, CallStatus]] = {
    "outcome_unknown": "unknown",
    "auth": "failed",
    "invalid_request": "failed",
    "invalid_response": "failed",
    "rate_limited": "not_sent",
    "connection": "not_sent",
    "timeout": "not_sent",
    "aborted": "not_sent",
    "configuration": "not_sent",
}


def call_status(error: DecisionProviderError) -> CallStatus:
    """The call status a provider failure leaves; a code this map does not know may have
    reached the provider: ``unknown``, never sent again."""
    return CALL_STATUS.get(error.code, "unknown")
