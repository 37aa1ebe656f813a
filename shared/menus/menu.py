"""``Menu``: a plan of options, normalised and rendered once, with its fingerprint.

Everything that takes options accepts a ``Menu`` too, so the worker can build one from the
wire (``menu_from_json``), validate it with the job, and drive the steps itself without
normalising or rendering again. The fingerprint is the SHA-256 of the rendered text: what
the model sees is what the ledger keys on (two menus that differ only in a value option's
value render, and fingerprint, the same).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.menus.option_types import FunctionOption, Option
from shared.menus.options import normalize_options
from shared.menus.render import render_normalized

__all__ = ["Menu", "MenuLike", "as_menu", "build_menu", "check_injections"]


@dataclass(frozen=True)
class Menu:
    options: tuple[Option, ...]
    text: str
    fingerprint: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def option(self, name: str) -> Option | None:
        for option in self.options:
            if option.name == name:
                return option
        return None

    def check_injections(self, context: Mapping[str, Any] | None, runtime: Any) -> None:
        check_injections(self.options, context, runtime)


MenuLike = Menu | Mapping[str, Any] | list[Any] | tuple[Any, ...]


def build_menu(options: Any, *, handlers: Mapping[str, Callable[..., Any]] | None = None) -> Menu:
    if isinstance(options, Menu):
        return options
    normalized = normalize_options(options, handlers=handlers)
    text = render_normalized(normalized)
    return Menu(normalized, text, hashlib.sha256(text.encode("utf-8")).hexdigest())


def as_menu(options: Any) -> Menu:
    return build_menu(options)


def check_injections(
    options: tuple[Option, ...], context: Mapping[str, Any] | None, runtime: Any
) -> None:
    """``TypeError`` if a function option needs a context key or a runtime it will not get.

    Called before any model call: a missing injection is the caller's mistake, not the
    model's, and must not cost a request (nor be "retried").
    """
    for option in options:
        if isinstance(option, FunctionOption):
            missing_injection(option, context, runtime)


def missing_injection(
    option: FunctionOption, context: Mapping[str, Any] | None, runtime: Any
) -> None:
    for param in option.params:
        if not param.required:
            continue
        key = param.context_key or param.name
        if param.source == "context" and (context is None or key not in context):
            raise TypeError(
                f"option {option.name!r}: parameter {param.name!r} needs context[{key!r}]"
            )
        if param.source == "runtime" and runtime is None:
            raise TypeError(f"option {option.name!r}: parameter {param.name!r} needs a runtime")
