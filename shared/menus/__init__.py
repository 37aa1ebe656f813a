"""The menu engine (seed 000, "next-step decision"): pure, no I/O.

Give the model a menu of options, it picks one as JSON, the pick is parsed, validated and
resolved into the result of the next step::

    with bind_runtime(runtime):
        result = make("Pick one way to handle this message.", {
            "analyze": analyze_sentiment,                 # a function option
            "done": "CONVERSATION_OVER",                  # a value option
            "plan": ("Produce a plan.", {"steps": [{"action": str, "target": str}]}),
        })

Modules, one concept each: ``spec`` (the schema model), ``schema`` (the notation),
``annotations`` (Python types), ``schema_json`` (the schema's wire encoding),
``option_types``/``signature``/``options`` (the containers), ``menu`` (a normalised,
rendered, fingerprinted plan), ``menu_json`` (the options' wire encoding), ``shapes`` and
``render`` (the text menu), ``extract``/``validate``/``parse`` (reply to pick), ``resolve``,
``runtime`` (the model seam and its binding), ``prompts``, ``tools``, ``session`` (the
procedure as a sans-I/O state machine, which the worker drives), ``make`` (the sync
drivers), ``faux`` (a scripted runtime for tests).
"""

from shared.errors import DecisionError
from shared.menus.errors import PICK_ERROR_KINDS, MenuSpecInvalid, PickError, PickErrorKind, Problem
from shared.menus.extract import ARGS_KEYS, CALL_KEYS, extract_action
from shared.menus.make import drive, make, run_turn
from shared.menus.menu import Menu, as_menu, build_menu, check_injections
from shared.menus.menu_json import (
    OPTIONS_JSON_SCHEMA,
    PICK_JSON_SCHEMA,
    menu_from_json,
    menu_to_json,
)
from shared.menus.option_types import (
    FromContext,
    FunctionOption,
    Handler,
    Option,
    Param,
    SchemaOption,
    ValueOption,
)
from shared.menus.options import normalize_options
from shared.menus.parse import Pick, parse_args, parse_pick, reply_text
from shared.menus.prompts import (
    DECISION_FINISH_INSTRUCTION,
    REPLY_HEAD_CHARS,
    RETRY_ERROR_CHARS,
    RETRY_PROMPT_CHARS,
    RETRY_REPLY_CHARS,
    build_menu_prompt,
    build_retry_messages,
    build_turn_messages,
    clip,
)
from shared.menus.render import MENU_HEADER, render_options
from shared.menus.resolve import resolve_decision
from shared.menus.runtime import (
    Message,
    ModelReply,
    Runtime,
    ToolCall,
    ToolSpec,
    bind_runtime,
    current_runtime,
    resolve_runtime,
)
from shared.menus.schema import META_KEYS, normalize_schema
from shared.menus.schema_json import (
    SCHEMA_JSON_SCHEMA,
    schema_from_json,
    schema_to_json,
    type_json_schema,
)
from shared.menus.session import (
    DEFAULT_MAX_STEPS,
    TURN_RETRIES,
    Decided,
    DecisionSession,
    Finished,
    ModelStep,
    ToolStep,
)
from shared.menus.spec import Field, Schema, TypeSpec
from shared.menus.tools import (
    assistant_message,
    normalize_tools,
    parse_tool_call,
    tool_error_message,
    tool_result_message,
    tool_specs,
)

__all__ = [
    "ARGS_KEYS",
    "CALL_KEYS",
    "DECISION_FINISH_INSTRUCTION",
    "DEFAULT_MAX_STEPS",
    "MENU_HEADER",
    "META_KEYS",
    "OPTIONS_JSON_SCHEMA",
    "PICK_ERROR_KINDS",
    "PICK_JSON_SCHEMA",
    "REPLY_HEAD_CHARS",
    "RETRY_ERROR_CHARS",
    "RETRY_PROMPT_CHARS",
    "RETRY_REPLY_CHARS",
    "SCHEMA_JSON_SCHEMA",
    "TURN_RETRIES",
    "Decided",
    "DecisionError",
    "DecisionSession",
    "Field",
    "Finished",
    "FromContext",
    "FunctionOption",
    "Handler",
    "Menu",
    "MenuSpecInvalid",
    "Message",
    "ModelReply",
    "ModelStep",
    "Option",
    "Param",
    "Pick",
    "PickError",
    "PickErrorKind",
    "Problem",
    "Runtime",
    "Schema",
    "SchemaOption",
    "ToolCall",
    "ToolSpec",
    "ToolStep",
    "TypeSpec",
    "ValueOption",
    "as_menu",
    "assistant_message",
    "bind_runtime",
    "build_menu",
    "build_menu_prompt",
    "build_retry_messages",
    "build_turn_messages",
    "check_injections",
    "clip",
    "current_runtime",
    "drive",
    "extract_action",
    "make",
    "menu_from_json",
    "menu_to_json",
    "normalize_options",
    "normalize_schema",
    "normalize_tools",
    "parse_args",
    "parse_pick",
    "parse_tool_call",
    "render_options",
    "reply_text",
    "resolve_decision",
    "resolve_runtime",
    "run_turn",
    "schema_from_json",
    "schema_to_json",
    "tool_error_message",
    "tool_result_message",
    "tool_specs",
    "type_json_schema",
]
