"""From a reply to a validated pick (``parse_args``/``parse_pick``).

The reply is a ``ModelReply``, its text, or (for a reviewer's answer) a pick object
``{"call": ..., "args": {...}}`` itself. A ``ModelReply`` that was refused (a ``refusal``, or
``finish_reason == "content_filter"``) fails as ``refusal``; one cut off
(``finish_reason == "length"``) as ``truncated``, even if a pick can be read from it: the
model may have meant a later one. Then:

- the call must name an option (``unknown_call`` lists the valid names);
- a function option: injected parameters are filled (``runtime``, ``FromContext``) and any
  value the model sent for them is dropped; model parameters are validated recursively;
  required ones (no default) must be present (``missing_required``); fields outside the
  signature are dropped unless the function takes ``**kwargs``, which receives them;
- a schema option: every declared field is required, recursively; extras are dropped;
- a value option: arguments are ignored.

Every problem names its field path; all of them (up to ``MAX_PROBLEMS``) are reported in one
``PickError`` whose ``kind`` is the first one's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.menus.errors import PickError, Problem
from shared.menus.extract import extract_action, read_action
from shared.menus.menu import as_menu
from shared.menus.option_types import FunctionOption, Option, SchemaOption
from shared.menus.runtime import ModelReply, Runtime, current_runtime
from shared.menus.validate import validate_fields, validate_value

__all__ = ["Pick", "parse_args", "parse_pick", "reply_text"]


@dataclass(frozen=True)
class Pick:
    """A validated pick.

    ``args`` are the model's validated arguments (JSON, safe to store); ``kwargs`` are what
    resolution uses: ``args`` plus injected values for a function option, the fields for a
    schema option, nothing for a value option.
    """

    option: Option
    args: dict[str, Any]
    kwargs: dict[str, Any]
    raw: str = ""

    def to_json(self) -> dict[str, Any]:
        """The pick in its wire form: ``{"call": name, "args": {...}}``."""
        return {"call": self.option.name, "args": self.args}


def reply_text(reply: object) -> str:
    """The text of a reply, for heads and retries (a refusal's text when there is no other)."""
    if isinstance(reply, ModelReply):
        return reply.text or reply.refusal or ""
    return reply if isinstance(reply, str) else ""


def parse_pick(
    reply: ModelReply | str | Mapping[str, Any],
    options: Any,
    *,
    context: Mapping[str, Any] | None = None,
    runtime: Runtime | None = None,
) -> Pick:
    menu = as_menu(options)  # malformed options are the caller's TypeError/ValueError, not retried
    try:
        name, args, raw = _action(reply)
    except PickError as error:
        if error.kind != "unknown_call":
            raise
        valid = ", ".join(menu.names)
        raise PickError(
            "unknown_call", f"{error.message}; valid options: {valid}", path="call"
        ) from None
    option = menu.option(name)
    if option is None:
        valid = ", ".join(menu.names)
        raise PickError(
            "unknown_call", f"{name!r} is not an option; valid options: {valid}", path="call"
        )
    problems: list[Problem] = []
    if isinstance(option, FunctionOption):
        rt = runtime if runtime is not None else current_runtime()
        model_args, kwargs = bind_function_args(option, args, context, rt, problems)
    elif isinstance(option, SchemaOption):
        model_args = validate_fields(args, option.schema.as_type(), "", problems)
        kwargs = dict(model_args)
    else:
        model_args, kwargs = {}, {}
    if problems:
        raise PickError.from_problems(problems)
    return Pick(option, model_args, kwargs, raw)


def parse_args(
    reply: ModelReply | str | Mapping[str, Any],
    options: Any,
    *,
    context: Mapping[str, Any] | None = None,
    runtime: Runtime | None = None,
) -> tuple[Option, dict[str, Any]]:
    """``(chosen, kwargs)``: the chosen option and the arguments resolution calls it with."""
    pick = parse_pick(reply, options, context=context, runtime=runtime)
    return pick.option, pick.kwargs


def _action(reply: object) -> tuple[str, dict[str, Any], str]:
    """The call name, arguments and raw JSON text of a reply (or of a pick object)."""
    if isinstance(reply, Mapping):
        name, args = read_action(dict(reply))
        return name, args, ""
    text: object = reply
    if isinstance(reply, ModelReply):
        _check_stop(reply)
        text = reply.text
        if text is None and reply.tool_calls:
            raise PickError(
                "no_action",
                "the reply made native tool calls instead of a pick; "
                'reply with {"call": "<option name>", "args": {...}} in the text',
            )
        if text is None:
            raise PickError("no_action", "the reply is empty")
    return extract_action(text)


def _check_stop(reply: ModelReply) -> None:
    if reply.refused:
        said = f": {reply.refusal[:200]}" if reply.refusal else ""
        raise PickError("refusal", f"the model refused{said}")
    if reply.truncated:
        raise PickError(
            "truncated",
            "the reply was cut off (finish reason: length); reply with the JSON pick only, briefly",
        )


def bind_function_args(
    option: FunctionOption,
    args: dict[str, Any],
    context: Mapping[str, Any] | None,
    runtime: Runtime | None,
    problems: list[Problem],
) -> tuple[dict[str, Any], dict[str, Any]]:
    injected = option.injected_names
    model_args: dict[str, Any] = {}
    declared: set[str] = set()
    for param in option.llm_params:
        declared.add(param.name)
        if param.name in args:
            model_args[param.name] = validate_value(
                args[param.name], param.spec, param.name, problems
            )
        elif param.required:
            problems.append(Problem("missing_required", param.name, "required field is missing"))
    if option.accepts_extra:
        for key, value in args.items():
            if key not in declared and key not in injected:
                model_args[key] = value
    kwargs = dict(model_args)
    for param in option.params:
        if param.source == "runtime":
            if runtime is not None:
                kwargs[param.name] = runtime
            elif param.required:
                raise RuntimeError(
                    f"option {option.name!r} needs a runtime for {param.name!r}; none is bound"
                )
        elif param.source == "context":
            key = param.context_key or param.name
            if context is not None and key in context:
                kwargs[param.name] = context[key]
            elif param.required:
                raise TypeError(
                    f"option {option.name!r}: parameter {param.name!r} needs context[{key!r}]"
                )
    return model_args, kwargs
