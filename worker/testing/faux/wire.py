"""The faux provider's wire vocabulary: paths, header names and response field names.

Everything the faux puts on or reads off the wire that a real host decides is named here,
once. Names marked *unconfirmed* are ones no public document settled (see
``reference/decision-apis.md``); each is the safe reading, kept as a constant so that a
correction is one edit.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "API_KEY_HEADER",
    "CALL_KEY_HEADER",
    "DANGER_ZONE_IMAGES_HEADER",
    "DEFAULT_MODEL",
    "MAX_BODY_BYTES",
    "OPENAI_DEFAULT_MODEL",
    "OPENAI_ID_FIELD",
    "OPENAI_ID_PREFIX",
    "OPENAI_OBJECT",
    "OPENROUTER_ID_PREFIX",
    "OPENROUTER_PROVIDER_NAME",
    "PARALLEL_CITATIONS_FIELD",
    "PARALLEL_MODEL_PREFIX",
    "PARALLEL_MODES",
    "PARALLEL_MODE_FIELD",
    "PARALLEL_REQUEST_ID_FIELD",
    "PARALLEL_REQUEST_ID_PREFIX",
    "PATH_DECISIONS",
    "PATH_OPENROUTER_MODELS",
    "PATH_OPENROUTER_SYSTEM_ONE",
    "PATH_SYSTEM_ONE",
    "PATH_TYPESAFE_MODELS",
    "TYPESAFE_REQUEST_ID_HEADER",
    "Flavour",
]

#: Which real API a request is answered as.
Flavour = Literal["typesafe", "openrouter", "parallel", "openai"]

# --- paths ------------------------------------------------------------------------------
PATH_SYSTEM_ONE: Final = "/v1/systemone"
PATH_OPENROUTER_SYSTEM_ONE: Final = "/api/v1/systemone"
PATH_DECISIONS: Final = "/v1/decisions"
PATH_TYPESAFE_MODELS: Final = "/v1/models"
PATH_OPENROUTER_MODELS: Final = "/api/v1/models"

# --- request headers --------------------------------------------------------------------
#: The ledger key of the call; the faux counts requests by it (``/_faux/calls``).
CALL_KEY_HEADER: Final = "x-decisions-call"
#: Parallel's key header. *Unconfirmed* ("commonly x-api-key"); the faux also accepts Bearer.
API_KEY_HEADER: Final = "x-api-key"
DANGER_ZONE_IMAGES_HEADER: Final = "typesafe-danger-zone-images"

# --- response headers -------------------------------------------------------------------
#: TypeSafe direct puts no id in the body; its request id is this header.
TYPESAFE_REQUEST_ID_HEADER: Final = "x-typesafe-request-id"

# --- models -----------------------------------------------------------------------------
#: The model a System One request that names none is answered as.
DEFAULT_MODEL: Final = "faux-1"
OPENAI_DEFAULT_MODEL: Final = "gpt-6-luna"

# --- OpenRouter -------------------------------------------------------------------------
OPENROUTER_ID_PREFIX: Final = "gen-dec-"
OPENROUTER_PROVIDER_NAME: Final = "faux"

# --- Parallel (response shape beyond answers/citations is *unconfirmed*) -----------------
#: The seed names the receipt's decision id ``provider_request_id``; *unconfirmed* as the
#: body field's name, so the faux uses exactly that name at the top level of the response.
PARALLEL_REQUEST_ID_FIELD: Final = "provider_request_id"
PARALLEL_REQUEST_ID_PREFIX: Final = "dec_"
#: Documented: request-level ``citations: [{"url", "title"?, "excerpts": [...]}]``.
PARALLEL_CITATIONS_FIELD: Final = "citations"
#: *Unconfirmed*: the request and response field naming the mode; ``fast`` is the only one.
PARALLEL_MODE_FIELD: Final = "mode"
PARALLEL_MODES: Final = ("fast",)
PARALLEL_MODEL_PREFIX: Final = "parallel-"

# --- OpenAI Decisions (envelope fields beyond ``answers`` are *unconfirmed*) --------------
OPENAI_ID_FIELD: Final = "id"
OPENAI_ID_PREFIX: Final = "dec_"
OPENAI_OBJECT: Final = "decision"

#: System One's documented body cap (32 MiB); larger is a 413.
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
