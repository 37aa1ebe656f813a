"""Decision providers: the seam (``base``), the replay-never transport, and the providers.

``ProviderRegistry.from_settings(settings, http=client)`` builds every provider the worker
knows; ``registry.get(name).prepare(request)`` then ``.send(prepared, deadline)`` is one
call, in two halves so the ledger can claim it between them. ``call_status(error)`` says
which ledger state a failure is.
"""

from shared.decoding import decode_answers, derived_confidence
from shared.outcomes import CALL_STATUS, call_status
from worker.providers.base import (
    DecisionProvider,
    DecisionRequest,
    PreparedRequest,
    ProviderLimits,
    ProviderResult,
    ReplayPolicy,
)
from worker.providers.catalog import CATALOG_PATH, ModelCatalog
from worker.providers.httpbase import CALL_KEY_HEADER, HttpDecisionProvider
from worker.providers.images import ImagePlan, is_jev, plan_images, token
from worker.providers.limiter import Limiter, NoLimiter
from worker.providers.limits import check_limits, rendered_length, state_bytes
from worker.providers.openai import OpenAIDecisionsProvider
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetails,
    OutboundRequest,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
    parse_retry_after,
    read_key,
)
from worker.providers.parallel import ParallelProvider
from worker.providers.registry import BUILT_IN, ProviderRegistry
from worker.providers.systemone import SystemOneConfig, SystemOneProvider
from worker.providers.transport import send_never_replay, was_cancelled

__all__ = [
    "BUILT_IN",
    "CALL_KEY_HEADER",
    "CALL_STATUS",
    "CATALOG_PATH",
    "AuthSpec",
    "DecisionProvider",
    "DecisionRequest",
    "ErrorDetails",
    "HttpDecisionProvider",
    "ImagePlan",
    "Limiter",
    "ModelCatalog",
    "NoLimiter",
    "OpenAIDecisionsProvider",
    "OutboundRequest",
    "ParallelProvider",
    "PreparedRequest",
    "ProviderLimits",
    "ProviderRegistry",
    "ProviderResult",
    "ReplayPolicy",
    "SystemOneConfig",
    "SystemOneProvider",
    "TransportPolicy",
    "TransportResponse",
    "UnknownCost",
    "call_status",
    "check_limits",
    "decode_answers",
    "derived_confidence",
    "is_jev",
    "parse_retry_after",
    "plan_images",
    "read_key",
    "rendered_length",
    "send_never_replay",
    "state_bytes",
    "token",
    "was_cancelled",
]
