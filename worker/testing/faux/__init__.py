"""The faux provider: a fake of the decision APIs for CI, the demo, faults and benchmarks.

Stable made-up answers (a hash of model, question and state) in the System One, OpenRouter,
Parallel and OpenAI Decisions shapes, a chat-completions endpoint for menus
(``worker.testing.faux.chat``), a small model catalog, request counts by digest and
call key, and failure injection (``FauxBehaviour``) from status codes to connection resets.
In process through ``FauxProvider.transport()``, or on a socket with ``FauxServer`` /
``serve`` / ``run_forever``. Nothing in it reaches past loopback.
"""

from .answers import BAD_NOUL, BAD_PROBABILITY_MASS, answer_question, spoil_answer
from .app import FauxProvider
from .behaviour import CONNECTION_MODES, FauxBehaviour, FauxMode
from .catalog import CATALOG, CatalogModel, openrouter_catalog, takes_images, typesafe_models
from .chat import CHAT_PATHS, FauxChat, FauxChatBehaviour, FauxChatReply, FauxToolCall
from .outcome import FauxDrop, FauxResponse, Outcome
from .responses import (
    openai_question_to_system_one,
    openai_response,
    openrouter_response,
    parallel_response,
    system_one_answers,
    system_one_response,
)
from .server import FauxServer, run_forever, serve
from .transport import FauxTransport

__all__ = [
    "BAD_NOUL",
    "BAD_PROBABILITY_MASS",
    "CATALOG",
    "CHAT_PATHS",
    "CONNECTION_MODES",
    "CatalogModel",
    "FauxBehaviour",
    "FauxChat",
    "FauxChatBehaviour",
    "FauxChatReply",
    "FauxDrop",
    "FauxMode",
    "FauxProvider",
    "FauxResponse",
    "FauxServer",
    "FauxToolCall",
    "FauxTransport",
    "Outcome",
    "answer_question",
    "openai_question_to_system_one",
    "openai_response",
    "openrouter_catalog",
    "openrouter_response",
    "parallel_response",
    "run_forever",
    "serve",
    "spoil_answer",
    "system_one_answers",
    "system_one_response",
    "takes_images",
    "typesafe_models",
]
