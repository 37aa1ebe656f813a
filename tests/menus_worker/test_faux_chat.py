"""The faux chat-completions endpoint on a real socket: flavours, validation, scripting over
``/_faux/chat``, counts per ``X-Decisions-Call``, and the faux's failure modes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.menus import DecisionSession, build_menu_prompt, parse_pick
from worker.testing.faux import FauxServer
from worker.testing.faux.chat_replies import menu_calls

AUTH = {"Authorization": "Bearer anything"}


@pytest.fixture
def server() -> Iterator[FauxServer]:
    with FauxServer() as running:
        yield running


def menu_messages() -> list[Any]:
    options = {
        "refund": ("Refund.", {"order": str, "amount": float}),
        "close": "CLOSED",
        "plan": ("Plan.", {"steps": [{"action": {"type": str, "options": ["a", "b"]}}]}),
    }
    return list(DecisionSession.for_make("Route it.", options).start().messages)


def chat(
    server: FauxServer, body: Any, *, path: str = "/api/v1/chat/completions", **headers: str
) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={**AUTH, **headers}, timeout=5)


def test_openrouter_flavour_reports_cost_and_openai_flavour_does_not(server: FauxServer) -> None:
    body = {"model": "m", "messages": menu_messages()}
    routed = chat(server, body).json()
    plain = chat(server, body, path="/v1/chat/completions").json()
    assert routed["id"].startswith("gen-") and routed["usage"]["cost"] > 0
    assert plain["id"].startswith("chatcmpl-") and "cost" not in plain["usage"]
    assert routed["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]


def test_a_deterministic_reply_is_a_valid_pick_of_the_menu(server: FauxServer) -> None:
    options = {
        "refund": ("Refund.", {"order": str, "amount": float}),
        "close": "CLOSED",
        "plan": ("Plan.", {"steps": [{"action": {"type": str, "options": ["a", "b"]}}]}),
    }
    picked = set()
    for i in range(24):
        messages = build_menu_prompt(f"Ticket {i}: route it.", options)
        content = chat(server, {"model": "m", "messages": messages}).json()["choices"][0][
            "message"
        ]["content"]
        picked.add(parse_pick(content, options).option.name)
    assert picked == {"refund", "close", "plan"}


def test_requests_are_validated_and_need_a_key(server: FauxServer) -> None:
    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    no_key = httpx.post(server.url + "/v1/chat/completions", json=good, timeout=5)
    assert no_key.status_code == 401
    for bad, param in [
        ({"messages": good["messages"]}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({**good, "tools": [{"type": "function"}]}, "tools.0"),
    ]:
        response = chat(server, bad, path="/v1/chat/completions")
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param


def test_scripting_over_http_and_counting_per_call_key(server: FauxServer) -> None:
    script = {
        "script": [
            {"content": "no pick at all"},
            {"refusal": "Not allowed."},
            {"pick": "close", "finish_reason": "length"},
            {"tool_calls": [{"name": "lookup", "arguments": {"id": 3}}]},
        ],
        "by_call": {"job-9/pick.0": {"pick": "refund", "args": {"order": "o", "amount": 2}}},
    }
    assert httpx.put(server.url + "/_faux/chat", json=script, timeout=5).status_code == 200
    body = {"model": "m", "messages": menu_messages()}
    messages = [chat(server, body).json()["choices"][0] for _ in range(4)]
    assert messages[0]["message"]["content"] == "no pick at all"
    assert messages[1]["message"]["refusal"] == "Not allowed."
    assert messages[2]["finish_reason"] == "length"
    assert '"call": "close"' in messages[2]["message"]["content"]
    call = messages[3]["message"]["tool_calls"][0]
    assert messages[3]["finish_reason"] == "tool_calls"
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "lookup",
        {"id": 3},
    )
    keyed = chat(server, body, **{"X-Decisions-Call": "job-9/pick.0"}).json()
    content = keyed["choices"][0]["message"]["content"]
    assert json.loads(content.split("```json\n")[1].split("\n```")[0]) == {
        "call": "refund",
        "args": {"order": "o", "amount": 2},
    }
    chat(server, body, **{"X-Decisions-Call": "job-9/pick.0"})
    calls = httpx.get(server.url + "/_faux/calls", timeout=5).json()
    assert calls == {"job-9/pick.0": 2}
    left = httpx.get(server.url + "/_faux/chat", timeout=5).json()
    assert left["script"] == [] and "job-9/pick.0" in left["by_call"]
    assert httpx.put(server.url + "/_faux/chat", json={"script": "x"}, timeout=5).status_code == 422


def test_deterministic_tool_calls_use_the_tool_s_schema(server: FauxServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string"},
                        "n": {"type": ["integer", "null"]},
                    },
                    "required": ["order_id", "n"],
                },
            },
        }
    ]
    first = chat(server, {"model": "m", "messages": menu_messages(), "tools": tools}).json()
    call = first["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"order_id": "<str>", "n": 0}
    worked = [*menu_messages(), {"role": "tool", "tool_call_id": "call_0", "content": "{}"}]
    after = chat(server, {"model": "m", "messages": worked, "tools": tools}).json()
    assert "```json" in after["choices"][0]["message"]["content"]
    httpx.patch(server.url + "/_faux/chat", json={"use_tools": False}, timeout=5)
    plain = chat(server, {"model": "m", "messages": menu_messages(), "tools": tools}).json()
    assert "tool_calls" not in plain["choices"][0]["message"]


def test_the_faux_failure_modes_apply_to_chat_requests(server: FauxServer) -> None:
    body = {"model": "m", "messages": menu_messages()}
    httpx.put(
        server.url + "/_faux/behaviour",
        json={"mode": "rate_limit", "retry_after_s": 1, "fail_first": 1},
        timeout=5,
    )
    limited = chat(server, body)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert chat(server, body).status_code == 200
    httpx.put(server.url + "/_faux/behaviour", json={"mode": "garbage"}, timeout=5)
    with pytest.raises(ValueError):
        chat(server, body).json()
    httpx.put(server.url + "/_faux/behaviour", json={"mode": "drop_after_read"}, timeout=5)
    with pytest.raises(httpx.RemoteProtocolError):
        chat(server, body)


def test_menu_calls_reads_the_last_menu_shown() -> None:
    messages = menu_messages()
    calls = menu_calls(messages)
    assert [c["call"] for c in calls] == ["refund", "close", "plan"]
    assert calls[0]["args"] == {"order": "<str>", "amount": 0.0}
    assert menu_calls([{"role": "user", "content": "no menu"}]) == []


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_reply_is_cut_at_the_bound_the_request_sets(server: FauxServer, field: str) -> None:
    body = {"model": "m", "messages": menu_messages()}
    whole = chat(server, body).json()
    assert whole["usage"]["completion_tokens"] > 2
    cut = chat(server, {**body, field: 2}).json()
    [choice] = cut["choices"]
    assert choice["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 2
    assert len(choice["message"]["content"]) <= 8  # two tokens' worth, no more
    for bad in (0, -1, 1.5, "10", True):
        refused = chat(server, {**body, field: bad})
        assert refused.status_code == 400 and field in refused.text, bad
