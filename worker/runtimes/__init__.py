"""LLM runtimes for menus: the OpenAI-compatible chat-completions runtime and its registry.

``RuntimeRegistry.from_settings(settings, http=client)`` builds every chat runtime the worker
knows; ``registry.get(name).prepare(messages, tools)`` then ``.send(prepared, deadline)`` is
one model call, in two halves so the ledger can claim it in between. ``BlockingRuntime`` /
``open_runtime`` serve the engine's synchronous ``Runtime`` protocol for the Python API.
"""

from worker.runtimes.blocking import AsyncExec, BlockingRuntime, open_runtime
from worker.runtimes.chat import (
    CHAT_PATH,
    FAUX_CHAT_MODEL,
    ChatConfig,
    ChatResult,
    ChatRuntime,
    PreparedChat,
)
from worker.runtimes.registry import BUILT_IN_RUNTIMES, RuntimeRegistry
from worker.runtimes.wire import ResponseInvalid, decode_reply, reported_cost

__all__ = [
    "BUILT_IN_RUNTIMES",
    "CHAT_PATH",
    "FAUX_CHAT_MODEL",
    "AsyncExec",
    "BlockingRuntime",
    "ChatConfig",
    "ChatResult",
    "ChatRuntime",
    "PreparedChat",
    "ResponseInvalid",
    "RuntimeRegistry",
    "decode_reply",
    "open_runtime",
    "reported_cost",
]
