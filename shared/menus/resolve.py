"""A pick resolved into the result of the next step (``resolve_decision``).

Function option: the function runs with the parsed and injected arguments and its return
value is the result; its exception propagates as itself (never a retry of the model call:
the model did its part). Value option: the value, as is. Schema option:
``{"decision": name, **fields}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.menus.menu import as_menu
from shared.menus.option_types import FunctionOption, Option, SchemaOption, ValueOption

__all__ = ["resolve_decision"]


def resolve_decision(
    chosen: Option | str | Callable[..., Any],
    kwargs: Mapping[str, Any],
    options: Any = None,
) -> Any:
    """Resolve ``chosen`` (an option, an option name, or a function option's function)."""
    option = _find(chosen, options)
    if isinstance(option, FunctionOption):
        return option.func(**kwargs)
    if isinstance(option, SchemaOption):
        return {"decision": option.name, **kwargs}
    return option.value


def _find(chosen: Option | str | Callable[..., Any], options: Any) -> Option:
    if isinstance(chosen, FunctionOption | ValueOption | SchemaOption):
        return chosen
    if options is None:
        if callable(chosen):
            return FunctionOption(getattr(chosen, "__name__", "function"), chosen)
        raise TypeError("resolving an option by name needs the options")
    menu = as_menu(options)
    if isinstance(chosen, str):
        option = menu.option(chosen)
        if option is None:
            raise LookupError(
                f"{chosen!r} is not an option; valid options: {', '.join(menu.names)}"
            )
        return option
    for option in menu.options:
        if isinstance(option, FunctionOption) and option.func is chosen:
            return option
    raise LookupError(f"{chosen!r} is not the function of any option")
