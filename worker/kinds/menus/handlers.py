"""The handler registry: the allowlist of functions a menu job may name.

A menu job's handler options (``{"kind": "handler", "handler": "issue_refund"}``) and its
``work.tools`` name functions by their registered name; a job can never name arbitrary code.
Handlers register where they are defined::

    from worker.kinds.menus.handlers import handler

    @handler("issue_refund")
    def issue_refund(order_id: str, amount: float) -> dict: ...

    register("escalate", escalate_to_human)       # the same, without a decorator

and the worker imports the modules listed in ``DECISIONS_HANDLERS`` (comma-separated or a
JSON list) when it starts (``load_handlers``), with the working directory on ``sys.path`` so
that ``DECISIONS_HANDLERS=examples.menus.handlers decisions run ...`` finds a module of the
project it is run from. A handler's signature is read when it registers, so one that cannot
be offered to a model (an unresolvable annotation, a positional-only parameter) stops the
worker at start, not a job later. Names are unique: registering another function under a
taken name is a ``ConfigurationError`` (the same function again, as on a re-import, is not).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from shared.errors import ConfigurationError
from shared.menus.signature import function_option

__all__ = [
    "HandlerRegistry",
    "handler",
    "load_handlers",
    "register",
    "registered",
    "unregister",
]

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_handlers: dict[str, Callable[..., Any]] = {}


class HandlerRegistry(Mapping[str, Callable[..., Any]]):
    """A frozen view of registered handlers, by name (what ``menu_from_json`` takes)."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]]) -> None:
        self._handlers = dict(handlers)

    def __getitem__(self, name: str) -> Callable[..., Any]:
        return self._handlers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    def __repr__(self) -> str:
        return f"HandlerRegistry({sorted(self._handlers)})"


def _same(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    key = ("__module__", "__qualname__")
    return a is b or all(getattr(a, k, None) == getattr(b, k, None) for k in key)


def register(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``fn`` under ``name``; returns ``fn``."""
    if not isinstance(name, str) or not name or name != name.strip() or " " in name:
        raise ConfigurationError(f"a handler name is a non-empty word, not {name!r}")
    if not callable(fn):
        raise ConfigurationError(f"handler {name!r}: {fn!r} is not callable")
    try:
        function_option(name, fn)
    except TypeError as exc:
        raise ConfigurationError(f"handler {name!r} cannot be offered to a model: {exc}") from exc
    with _lock:
        taken = _handlers.get(name)
        if taken is not None and not _same(taken, fn):
            raise ConfigurationError(
                f"handler name {name!r} is taken by {taken.__module__}.{taken.__qualname__}"
            )
        _handlers[name] = fn
    return fn


@overload
def handler(name: F) -> F: ...
@overload
def handler(name: str | None = None) -> Callable[[F], F]: ...
def handler(name: str | F | None = None) -> Callable[[F], F] | F:
    """Decorator: ``@handler("name")``, or ``@handler`` / ``@handler()`` for the function's name."""
    if callable(name):
        register(name.__name__, name)
        return name

    def decorate(fn: F) -> F:
        register(name or fn.__name__, fn)
        return fn

    return decorate


def unregister(name: str) -> None:
    """Remove a handler (tests)."""
    with _lock:
        _handlers.pop(name, None)


def registered() -> HandlerRegistry:
    """Every handler registered in this process so far."""
    with _lock:
        return HandlerRegistry(_handlers)


def load_handlers(modules: Iterable[str]) -> HandlerRegistry:
    """Import each module (registering its handlers) and return the registry.

    ``ConfigurationError`` names a module that does not import, so a worker misconfigured
    this way refuses to start.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        # `decisions` is a console script: its sys.path holds its own bin directory, not the
        # project the operator runs it from.
        sys.path.append(cwd)
    for module in modules:
        name = module.strip()
        if not name:
            continue
        try:
            importlib.import_module(name)
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ConfigurationError(
                f"DECISIONS_HANDLERS: cannot import {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
    return registered()
