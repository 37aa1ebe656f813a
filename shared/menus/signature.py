"""A function option from a function's signature and docstring.

Parameter types come from ``typing.get_type_hints(..., include_extras=True)``, so string
annotations (``from __future__ import annotations``), ``list[str]``, ``Optional[int]`` and
``Literal[...]`` are resolved and checked; an annotation that cannot be resolved or is not
supported raises ``TypeError`` naming the option and parameter, before any model call.

The description is the first paragraph of the docstring. A parameter's description is the
first string in its ``Annotated[...]`` metadata, else its entry in a Google-style
``Args:``/``Parameters:`` section or a Sphinx ``:param name:`` line.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shared.menus.annotations import annotation_description, spec_from_annotation
from shared.menus.option_types import NO_DEFAULT, FromContext, FunctionOption, Param
from shared.menus.runtime import Runtime
from shared.menus.spec import TypeSpec

__all__ = ["doc_params", "docstring_description", "first_paragraph", "function_option"]

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments):\s*$")
_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def function_option(
    name: str,
    func: Callable[..., Any],
    description: str | None = None,
    *,
    handler: str | None = None,
) -> FunctionOption:
    where = f"option {name!r}"
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: cannot read the signature of {func!r}: {exc}") from exc
    hints = _hints(func, where)
    doc = _doc(func)
    documented = doc_params(doc)
    params: list[Param] = []
    accepts_extra = False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            accepts_extra = True
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue
        has_default = p.default is not p.empty
        if p.kind is p.POSITIONAL_ONLY:
            if has_default:
                continue  # a pick fills keywords only; the default stands
            raise TypeError(
                f"{where}: positional-only parameter {p.name!r} cannot be filled from a pick"
            )
        params.append(_param(p, hints.get(p.name, Any), has_default, documented, where))
    return FunctionOption(
        name=name,
        func=func,
        description=description if description is not None else first_paragraph(doc),
        params=tuple(params),
        accepts_extra=accepts_extra,
        handler=handler,
    )


def _param(
    p: inspect.Parameter, hint: Any, has_default: bool, documented: dict[str, str], where: str
) -> Param:
    default = p.default if has_default else NO_DEFAULT
    if p.name == "runtime" or _is_runtime(hint):
        return Param(p.name, TypeSpec("any"), "runtime", not has_default, default)
    marker = _context_marker(hint)
    if marker is not None:
        key = marker.key or p.name
        return Param(p.name, TypeSpec("any"), "context", not has_default, default, context_key=key)
    spec = spec_from_annotation(hint, where=f"{where}, parameter {p.name!r}")
    described = annotation_description(hint) or documented.get(p.name)
    if described:
        spec = replace(spec, description=described)
    return Param(p.name, spec, "llm", not has_default, default)


def _hints(func: Callable[..., Any], where: str) -> dict[str, Any]:
    # get_type_hints reads a class's attribute annotations, not its __init__ parameters,
    # and a callable object's parameters are those of its __call__.
    target: Any = func
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.isclass(target):
        target = target.__init__
    elif not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = type(target).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # NameError, TypeError, ... from unresolvable annotations
        raise TypeError(f"{where}: cannot resolve the annotations of {func!r}: {exc!r}") from exc


def _is_runtime(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _is_runtime(hint.__origin__)
    if origin is typing.Union or origin is types.UnionType:
        return any(_is_runtime(a) for a in typing.get_args(hint) if a is not type(None))
    return hint is Runtime or (inspect.isclass(hint) and Runtime in getattr(hint, "__mro__", ()))


def _context_marker(hint: Any) -> FromContext | None:
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    for meta in hint.__metadata__:
        if meta is FromContext:
            return FromContext()
        if isinstance(meta, FromContext):
            return meta
    return None


def _doc(func: Callable[..., Any]) -> str:
    target: Any = func
    while isinstance(target, functools.partial):
        target = target.func
    # inspect.getdoc would hand a callable object its class's (or a builtin's) docstring.
    raw = (
        target.__doc__
        if (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isclass(target))
        else type(target).__doc__
    )
    return inspect.cleandoc(raw) if isinstance(raw, str) else ""


def docstring_description(func: Callable[..., Any]) -> str | None:
    """The description a function option gets from ``func``'s docstring."""
    return first_paragraph(_doc(func))


def first_paragraph(doc: str) -> str | None:
    """The docstring's first paragraph on one line (``None`` if it opens with a section)."""
    paragraph = doc.strip().split("\n\n", 1)[0].strip()
    if not paragraph or _SECTION.match(paragraph.splitlines()[0].strip()):
        return None
    return " ".join(paragraph.split())


def doc_params(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style section or Sphinx ``:param:`` lines."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    in_section = False
    section_indent = 0
    current: str | None = None
    entry_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX.match(stripped)
        if sphinx:
            current, in_section = sphinx.group(1), False
            found[current] = sphinx.group(2).strip()
            entry_indent = indent
            continue
        if _SECTION.match(stripped):
            in_section, section_indent, current = True, indent, None
            continue
        if not stripped:
            continue
        if in_section and indent <= section_indent:
            in_section, current = False, None
        if in_section:
            entry = _ENTRY.match(stripped)
            if entry and (current is None or indent <= entry_indent):
                current, entry_indent = entry.group(1), indent
                found[current] = entry.group(3).strip()
                continue
        if current is not None and indent > entry_indent:
            found[current] = f"{found[current]} {stripped}".strip()
        elif not in_section:
            current = None
    return {k: " ".join(v.split()) for k, v in found.items() if v}
