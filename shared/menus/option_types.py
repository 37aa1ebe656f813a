"""The three option kinds after normalisation, and the markers used to declare them.

A ``FunctionOption`` runs its function; a ``ValueOption`` returns its value; a
``SchemaOption`` returns ``{"decision": name, **fields}``. Every option has a name (unique in
its menu) and an optional one-line description.

Injection (the rule): a function parameter is *injected*, never shown to the model, when

- it is named ``runtime`` or annotated with ``Runtime`` (``Optional[Runtime]`` too): it gets
  the runtime the decision runs on;
- it is annotated ``Annotated[T, FromContext]``: it gets ``context[<parameter name>]``, or
  ``Annotated[T, FromContext("key")]``: ``context["key"]``.

The rule is static (it reads the signature, not the context passed at call time), so the
rendered menu, and with it the fingerprint, does not depend on the context. A value the
model sends for an injected parameter is dropped: injected values always win.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.menus.spec import Schema, TypeSpec

__all__ = [
    "FromContext",
    "FunctionOption",
    "Handler",
    "Option",
    "Param",
    "ParamSource",
    "SchemaOption",
    "ValueOption",
]

ParamSource = Literal["llm", "runtime", "context"]


@dataclass(frozen=True)
class FromContext:
    """Marks a parameter as filled from the ``context`` dict: ``Annotated[str, FromContext]``."""

    key: str | None = None


@dataclass(frozen=True)
class Handler:
    """A reference, by registered name, to a handler that lives in the worker.

    Client code that cannot import the handler uses it in place of the function:
    ``{"refund": Handler("issue_refund")}``. ``menu_to_json`` encodes it; only a
    ``handlers`` registry (``menu_from_json``, ``build_menu(..., handlers=)``) resolves it.
    """

    name: str


NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class Param:
    """One parameter of a function option."""

    name: str
    spec: TypeSpec
    source: ParamSource = "llm"
    required: bool = True
    default: Any = field(default=NO_DEFAULT, compare=False)
    context_key: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass(frozen=True)
class FunctionOption:
    name: str
    func: Callable[..., Any]
    description: str | None = None
    params: tuple[Param, ...] = ()
    #: The function takes ``**kwargs``: model fields outside the signature go there.
    accepts_extra: bool = False
    #: The registered handler name, when the option came from the wire or a ``Handler``.
    handler: str | None = None
    kind: Literal["function"] = field(default="function", init=False)

    @property
    def llm_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.source == "llm")

    @property
    def injected_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params if p.source != "llm")


@dataclass(frozen=True)
class ValueOption:
    name: str
    value: Any
    description: str | None = None
    kind: Literal["value"] = field(default="value", init=False)


@dataclass(frozen=True)
class SchemaOption:
    name: str
    schema: Schema
    description: str | None = None
    kind: Literal["schema"] = field(default="schema", init=False)

    def __post_init__(self) -> None:
        # The result is {"decision": name, **fields}: a field of that name would replace it.
        if "decision" in self.schema.names:
            raise ValueError(
                f"option {self.name!r}: a schema option cannot declare a 'decision' field"
            )


Option = FunctionOption | ValueOption | SchemaOption
