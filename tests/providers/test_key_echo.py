"""A host that puts the key it was sent back into a successful answer does not get it into a
receipt (and so into a reply, the ledger or the console).

Found by an attack: a gateway reflecting the ``Authorization`` header into its 200 body put
the key in ``receipts[].decision_id`` (the body's ``id``, or a request-id header) and, for a
chat runtime, in ``model``, the reply's content and the escalation built from it. Error
bodies were already guarded (``worker.providers.call_errors``); answers were not.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.menus import Message
from worker.runtimes.chat import ChatConfig, ChatResult, ChatRuntime
from worker.testing.faux import FauxProvider

from .support import CASE_IDS, CASES, FAST, Case, deadline

KEY = "zq7Rk2mW9xLp4vNc8bTy3hGd6fJs"  # no known key shape: only its value can give it away
WITH_KEY = [c for c in CASES if c.key_env]


class Echo(httpx.AsyncBaseTransport):
    """The faux behind a gateway that writes the key it was sent into every answer."""

    def __init__(self, inner: httpx.AsyncBaseTransport, form: str) -> None:
        self.inner = inner
        self.form = form

    def echoed(self, request: httpx.Request) -> str:
        sent = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
        key = sent.removeprefix("Bearer ").strip()
        if self.form == "upper":
            return key.upper()
        if self.form == "base64":
            return base64.b64encode(f"user:{key}".encode()).decode()
        return f"req-{key}"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        body = json.loads(response.content)
        echo = self.echoed(request)
        mark = "ECHO-MARK"  # written as the key, escaped, once the body is text
        if isinstance(body, dict):
            body["id"] = echo
            body["model"] = echo
            for choice in body.get("choices") or []:
                choice["message"]["content"] = f"{choice['message']['content']} {echo}"
                if self.form == "escaped":
                    arguments = json.dumps({"note": mark})  # a tool call's JSON text
                    choice["message"]["tool_calls"] = [
                        {"id": "c1", "type": "function",
                         "function": {"name": "t_note", "arguments": arguments}}
                    ]  # fmt: skip
        headers = {"content-type": "application/json"}
        if self.form != "escaped":
            headers |= {"x-request-id": echo, "request-id": echo}
        text = json.dumps(body)
        if self.form == "escaped":
            # Every character a \u escape: once in the body, twice in the tool call's
            # arguments (JSON text inside a JSON string).
            key = self.echoed(request).removeprefix("req-")
            once = "".join(f"\\u{ord(c):04x}" for c in key)
            text = text.replace(key, once).replace(mark, once.replace("\\", "\\\\"))
        return httpx.Response(response.status_code, headers=headers, content=text.encode())


async def ask_chat(transport: httpx.AsyncBaseTransport) -> ChatResult:
    """One model call of a chat runtime keyed by ``ECHO_CHAT_KEY``, through ``transport``."""
    http = httpx.AsyncClient(transport=transport)
    runtime = ChatRuntime(
        ChatConfig(
            name="echoing", base_url="http://faux.invalid", key_env="ECHO_CHAT_KEY",
            path="/api/v1/chat/completions", default_model="m",
        ),
        http=http,
    )  # fmt: skip
    messages: list[Message] = [{"role": "user", "content": "Pick one: a or b."}]
    try:
        return await runtime.send(runtime.prepare(messages), deadline())
    finally:
        await http.aclose()


@pytest.mark.parametrize("form", ["plain", "upper", "base64"])
@pytest.mark.parametrize("case", WITH_KEY, ids=[c.name for c in WITH_KEY])
async def test_a_key_echoed_in_an_answer_stays_out_of_the_receipt(
    case: Case, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CASE_IDS  # the suite's cases
    monkeypatch.setenv(case.key_env or "", KEY)
    faux = FauxProvider()
    http = httpx.AsyncClient(transport=Echo(faux.transport(), form))
    try:
        result = await case.provider(http, FAST).decide(case.request(), deadline())
    finally:
        await http.aclose()
    receipt = result.receipt.model_dump_json()
    assert KEY not in receipt and KEY.upper() not in receipt
    assert base64.b64encode(f"user:{KEY}".encode()).decode() not in receipt
    assert result.receipt.status == "answered"


@pytest.mark.parametrize("form", ["plain", "upper", "base64", "escaped"])
async def test_a_key_echoed_by_a_chat_host_stays_out_of_the_reply_and_receipt(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHO_CHAT_KEY", KEY)
    result = await ask_chat(Echo(FauxProvider().transport(), form))
    seen = result.receipt.model_dump_json() + json.dumps(result.raw) + repr(result.reply)
    # What a handler is given: a tool call's arguments, read as JSON.
    seen += "".join(json.dumps(json.loads(c.arguments)) for c in result.reply.tool_calls)
    seen = json.loads(json.dumps(seen))  # the text as read, escapes and all
    unescaped = seen.encode().decode("unicode_escape", "replace")
    assert KEY not in seen and KEY.upper() not in seen and KEY.lower() not in seen
    assert KEY not in unescaped
    assert base64.b64encode(f"user:{KEY}".encode()).decode() not in seen
    assert result.receipt.status == "answered"


class Hostile(httpx.AsyncBaseTransport):
    """The faux behind a host that answers 200 with a body rewritten by ``rewrite``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, form: str) -> None:
        self.inner = inner
        self.form = form

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        body = json.loads(response.content)
        made_up = {
            "key-as-question": [KEY],
            "key-in-pieces": [KEY[i : i + 11] for i in range(0, len(KEY), 11)],
            "many-questions": [f"made-up-{i}-" + "x" * 50 for i in range(5_000)],
        }.get(self.form)
        if made_up is not None:  # answers to questions the host was not asked
            answers = body.get("answers") if isinstance(body, dict) else None
            if not isinstance(answers, dict) or not answers:
                pytest.skip("this provider's answers are no object keyed by question")
            first = next(iter(answers.values()))
            answers.update(dict.fromkeys(made_up, first))
        text = json.dumps(body)
        if self.form == "surrogate":
            text = text.replace('"model": "', '"model": "\\udfff', 1)
            text = text.replace('"content": "', '"content": "\\udfff', 1)
            text = text.replace('"provider_request_id": "', '"provider_request_id": "\\udfff', 1)
        content = text.encode("utf-16" if self.form == "utf-16" else "utf-8")
        headers = {"content-type": "application/json"}
        return httpx.Response(response.status_code, headers=headers, content=content)


@pytest.mark.parametrize(
    "form", ["key-as-question", "key-in-pieces", "many-questions", "surrogate", "utf-16"]
)
@pytest.mark.parametrize("case", WITH_KEY, ids=[c.name for c in WITH_KEY])
async def test_a_hostile_answer_is_invalid_and_what_it_says_is_bounded_and_keyless(
    case: Case, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an attack: a host answering a question it was not asked, named by the key,
    # put the key in the escalation's detail ("answers to questions not asked: <key>"), and
    # 100,000 made-up ids made a 9.9 MB detail; a lone surrogate in the answer (JSON the
    # standard parser reads) left the job with no terminal message, its reply unwritable.
    monkeypatch.setenv(case.key_env or "", KEY)
    http = httpx.AsyncClient(transport=Hostile(FauxProvider().transport(), form))
    try:
        with pytest.raises(DecisionProviderError) as failed:
            await case.provider(http, FAST).decide(case.request(), deadline())
    finally:
        await http.aclose()
    error = failed.value
    assert error.code == "invalid_response"
    said = f"{error} {error.detail} {error.receipt.model_dump_json() if error.receipt else ''}"
    assert KEY not in said and len(error.detail or "") <= 500
    assert KEY[:11] not in said and KEY[11:22] not in said  # nor in pieces a scrub cannot know
    assert error.receipt is not None and error.receipt.status == "failed"
    said.encode("utf-8")  # no lone surrogate reaches a receipt or a message


@pytest.mark.parametrize("form", ["surrogate", "utf-16"])
async def test_a_chat_answer_that_is_not_strict_utf8_json_is_invalid(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an attack: a reply in UTF-16 went past the key scrub (read as UTF-8, its NUL
    # bytes hide every piece of the key) and json.loads, which reads UTF-16 by itself, gave
    # the key back in a pick's arguments; a lone surrogate made the job's reply unwritable.
    monkeypatch.setenv("ECHO_CHAT_KEY", KEY)
    with pytest.raises(DecisionProviderError) as failed:
        await ask_chat(Hostile(FauxProvider().transport(), form))
    assert failed.value.code == "invalid_response"
    assert "UTF-8" in (failed.value.detail or "") or "surrogate" in (failed.value.detail or "")
