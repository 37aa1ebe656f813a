"""The engine's synchronous ``Runtime`` protocol over an async model call.

``shared.menus.make``/``run_turn`` call ``runtime.exec(messages, tools=...)`` and wait. A
``BlockingRuntime`` runs the async call on an event loop of its own (a background thread),
or on a given one when called from another thread (a handler in the worker runs in a
thread, while the worker's loop stays free). Called on its own loop's thread it would wait
for itself forever, so that is a ``RuntimeError``.

``open_runtime("openrouter", model=...)`` is the Python API's way in::

    with bind_runtime(open_runtime("openrouter", model="openai/gpt-4o-mini")):
        make("Pick one way to handle this message.", options)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.menus import Message, ModelReply, ToolSpec
from shared.settings import Settings, get_settings
from worker.runtimes.chat import DEFAULT_EXEC_TIMEOUT_S, ChatRuntime

__all__ = ["AsyncExec", "BlockingRuntime", "open_runtime"]

AsyncExec = Callable[[list[Message], "list[ToolSpec] | None"], Coroutine[Any, Any, ModelReply]]


class _OwnLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="menus-runtime-loop", daemon=True
        )
        self.thread.start()


class BlockingRuntime:
    """``exec`` blocks on ``call(messages, tools)`` run on ``loop`` (or a loop of its own)."""

    def __init__(self, call: AsyncExec, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._call = call
        self._own = None if loop is not None else _OwnLoop()
        self._loop = loop if loop is not None else self._own.loop  # type: ignore[union-attr]

    @classmethod
    def for_chat(
        cls,
        runtime: ChatRuntime,
        *,
        model: str | None = None,
        timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> BlockingRuntime:
        async def call(messages: list[Message], tools: list[ToolSpec] | None) -> ModelReply:
            deadline = datetime.now(UTC) + timedelta(seconds=timeout_s)
            return await runtime.exec(messages, tools=tools, model=model, deadline=deadline)

        return cls(call, loop=loop)

    def exec(self, messages: list[Message], *, tools: list[ToolSpec] | None = None) -> ModelReply:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError(
                "BlockingRuntime.exec called on its own event loop; await the async call instead"
            )
        coro = self._call(messages, tools)
        future: Future[ModelReply] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def close(self) -> None:
        """Stop the loop this runtime started (a given loop is left alone)."""
        if self._own is not None:
            self._own.loop.call_soon_threadsafe(self._own.loop.stop)
            self._own.thread.join(timeout=5)


def open_runtime(
    name: str | None = None,
    *,
    model: str | None = None,
    settings: Settings | None = None,
    timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
) -> BlockingRuntime:
    """A synchronous runtime for ``make``/``run_turn``: the chat runtime ``name`` of settings."""
    from worker.runtimes.registry import RuntimeRegistry

    registry = RuntimeRegistry.from_settings(settings or get_settings())
    return BlockingRuntime.for_chat(registry.get(name), model=model, timeout_s=timeout_s)
