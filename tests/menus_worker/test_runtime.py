"""The chat-completions runtime: against the faux, and against loopback servers that fail at
one phase each (the providers' replay-never transport, so the same codes and ledger states)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.menus import DecisionSession, Message, ToolSpec, bind_runtime, make
from shared.outcomes import call_status
from shared.setting_types import ChatHost
from shared.settings import Settings
from tests.providers.loopback import LoopbackServer, Reply, refusing_port
from worker.providers import TransportPolicy
from worker.runtimes import BlockingRuntime, ChatConfig, ChatResult, ChatRuntime, RuntimeRegistry
from worker.testing.faux import FauxBehaviour, FauxChatReply, FauxProvider, FauxServer, FauxToolCall

KEY_VAR = "MENUS_LOOPBACK_KEY"
CANARY = "sk-menus-canary-5b1d"
POLICY = TransportPolicy(timeout_s=1.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)
MESSAGES: list[Message] = [{"role": "user", "content": "Pick one."}]
COMPLETION = {
    "id": "gen-abc",
    "model": "org/model-7",
    "choices": [
        {
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": '{"call": "close"}', "refusal": None},
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "cost": 0.00042},
}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, CANARY)


def deadline(seconds: float = 10.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def loopback_runtime(url: str, client: httpx.AsyncClient, **config: object) -> ChatRuntime:
    return ChatRuntime(
        ChatConfig(name="loop", base_url=url, key_env=KEY_VAR, default_model="m", **config),  # type: ignore[arg-type]
        http=client,
        policy=POLICY,
    )


async def send(url: str, **config: object) -> ChatResult:
    async with httpx.AsyncClient() as client:
        runtime = loopback_runtime(url, client, **config)
        prepared = runtime.prepare(MESSAGES, call_key="job-1/pick.0")
        return await runtime.send(prepared, deadline(), step="pick.0")


async def test_a_completion_is_decoded_with_its_reported_cost_and_id() -> None:
    async with LoopbackServer(Reply(body=COMPLETION)) as server:
        result = await send(server.url)
    reply, receipt = result.reply, result.receipt
    assert reply.text == '{"call": "close"}' and reply.finish_reason == "stop"
    assert (receipt.cost_usd, receipt.cost_basis) == (0.00042, "reported")
    assert (receipt.decision_id, receipt.model, receipt.step) == (
        "gen-abc",
        "org/model-7",
        "pick.0",
    )
    assert receipt.transport_attempts == 1
    head = server.heads[0].decode().lower()
    assert "post /v1/chat/completions" in head
    assert f"authorization: bearer {CANARY}".lower() in head
    assert "x-decisions-call: job-1/pick.0" in head
    body = json.loads(server.bodies[0])
    assert body == {"model": "m", "messages": MESSAGES}


async def test_without_usage_cost_the_cost_is_unknown_not_zero() -> None:
    completion = {**COMPLETION, "usage": {"prompt_tokens": 10}}
    async with LoopbackServer(Reply(body=completion)) as server:
        result = await send(server.url)
    assert result.receipt.cost_usd is None and result.receipt.cost_basis is None


async def test_tool_calls_refusals_truncation_and_content_parts_are_decoded() -> None:
    choices = [
        {
            "finish_reason": "tool_calls",
            "message": {
                "content": [{"type": "text", "text": "Looking "}, {"type": "text", "text": "up."}],
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"id": 1}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "other", "arguments": {"x": 2}},
                    },
                ],
            },
        }
    ]
    refused = [{"finish_reason": "stop", "message": {"content": None, "refusal": "No."}}]
    cut = [{"finish_reason": "length", "message": {"content": '{"call": "cl'}}]
    async with LoopbackServer(
        Reply(body={"choices": choices}),
        Reply(body={"choices": refused}),
        Reply(body={"choices": cut}),
    ) as server:
        tools = await send(server.url)
        refusal = await send(server.url)
        truncated = await send(server.url)
    reply = tools.reply
    assert reply.text == "Looking up." and reply.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("c1", "lookup", {"id": 1}),
        ("c2", "other", {"x": 2}),
    ]
    assert refusal.reply.refused and refusal.reply.refusal == "No."
    assert truncated.reply.truncated


@pytest.mark.parametrize(
    ("script", "code", "status", "requests"),
    [
        (["close_after_read"], "outcome_unknown", "unknown", 1),
        (["reset_after_read"], "outcome_unknown", "unknown", 1),
        ([Reply(status=500)], "outcome_unknown", "unknown", 1),
        ([Reply(status=408)], "outcome_unknown", "unknown", 1),
        ([Reply(status=401, body={"error": {"type": "invalid_api_key"}})], "auth", "failed", 1),
        ([Reply(status=400)], "invalid_request", "failed", 1),
        ([Reply(status=429)], "rate_limited", "not_sent", 1),
        ([Reply(body=b"{not json")], "invalid_response", "failed", 1),
        ([Reply(body={"choices": []})], "invalid_response", "failed", 1),
        # Valid JSON deeper than Python's parser goes: 200 KB, answered, so never again.
        ([Reply(body=b"[" * 100_000 + b"]" * 100_000)], "invalid_response", "failed", 1),
        ([Reply(body=b"x" * (POLICY.max_response_bytes + 1))], "invalid_response", "failed", 1),
        ([Reply(status=308, headers={"Location": "/elsewhere"})], "configuration", "not_sent", 1),
    ],
)
async def test_each_failing_phase_has_the_providers_code(
    script: list[object], code: str, status: str, requests: int
) -> None:
    async with LoopbackServer(*script) as server:  # type: ignore[arg-type]
        with pytest.raises(DecisionProviderError) as caught:
            await send(server.url)
    error = caught.value
    assert (error.code, call_status(error)) == (code, status)
    assert server.requests == requests  # never sent again
    assert error.receipt is not None and error.receipt.step == "pick.0"
    assert CANARY not in str(error) and CANARY not in error.receipt.model_dump_json()


async def test_a_429_with_retry_after_is_sent_again_then_answered() -> None:
    async with LoopbackServer(
        Reply(status=429, headers={"Retry-After": "0"}), Reply(body=COMPLETION)
    ) as server:
        result = await send(server.url)
    assert server.requests == 2 and result.receipt.transport_attempts == 2


async def test_an_unreachable_host_is_connection_and_nothing_was_sent() -> None:
    with pytest.raises(DecisionProviderError) as caught:
        await send(f"http://127.0.0.1:{refusing_port()}")
    assert caught.value.code == "connection" and caught.value.attempts == POLICY.max_attempts


async def test_a_missing_key_is_configuration_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_VAR)
    async with LoopbackServer(Reply(body=COMPLETION)) as server:
        with pytest.raises(DecisionProviderError) as caught:
            await send(server.url)
    assert caught.value.code == "configuration" and KEY_VAR in str(caught.value)
    assert server.connections == 0


async def test_a_model_the_host_does_not_serve_is_refused_in_prepare() -> None:
    async with httpx.AsyncClient() as client:
        runtime = loopback_runtime("http://127.0.0.1:1", client, models=("a", "b"))
        with pytest.raises(DecisionProviderError) as caught:
            runtime.prepare(MESSAGES, model="c")
    assert caught.value.code == "invalid_request" and caught.value.field == "runtime.model"


async def test_tools_and_usage_accounting_go_in_the_body() -> None:
    spec = ToolSpec("lookup", "Look up.", {"type": "object", "properties": {}})
    async with LoopbackServer(Reply(body=COMPLETION)) as server, httpx.AsyncClient() as client:
        runtime = loopback_runtime(server.url, client, usage_include=True)
        await runtime.exec(MESSAGES, tools=[spec], deadline=deadline())
    body = json.loads(server.bodies[0])
    assert body["tools"] == [spec.to_json()] and body["usage"] == {"include": True}


async def test_against_the_in_process_faux_a_session_is_answered_and_counted() -> None:
    faux = FauxProvider()
    registry = RuntimeRegistry.from_settings(
        Settings(_env_file=None), faux_transport=faux.transport()
    )
    runtime = registry.get("faux")
    session = DecisionSession.for_make("Pick.", {"close": "CLOSED", "wait": "WAIT"})
    step = session.start()
    prepared = runtime.prepare(step.messages, call_key="j/pick.0")
    result = await runtime.send(prepared, deadline(), step=step.step)
    assert result.receipt.cost_basis == "reported" and result.receipt.decision_id.startswith("gen-")  # type: ignore[union-attr]
    decided = session.on_reply(result.reply)
    assert decided.pick.option.name in {"close", "wait"}  # type: ignore[union-attr]
    # The same messages: the same pick.
    again = await runtime.send(prepared, deadline(), step=step.step)
    assert again.reply.text == result.reply.text
    assert faux.calls() == {"j/pick.0": 2}

    faux.update_behaviour(mode="status", status_code=503)
    with pytest.raises(DecisionProviderError) as caught:
        await runtime.send(prepared, deadline(), step=step.step)
    assert caught.value.code == "outcome_unknown"


def test_the_python_api_runs_make_on_the_faux_server() -> None:
    with FauxServer() as server:
        server.provider.chat.script(
            FauxChatReply(content="Let me think."),  # no pick: the retry is asked
            FauxChatReply(pick="plan", args={"steps": [{"action": "go", "target": "x"}]}),
        )
        settings = Settings(_env_file=None, faux_url=server.url)
        runtime = BlockingRuntime.for_chat(RuntimeRegistry.from_settings(settings).get("faux"))
        try:
            with bind_runtime(runtime):
                value = make(
                    "Plan it.", {"plan": ("A plan.", {"steps": [{"action": str, "target": str}]})}
                )
        finally:
            runtime.close()
        assert value == {"decision": "plan", "steps": [{"action": "go", "target": "x"}]}
        assert server.provider.total() == 2


def test_a_blocking_runtime_refuses_to_wait_on_its_own_loop() -> None:
    import asyncio

    async def call(messages: object, tools: object) -> object:
        raise AssertionError("never called")

    async def inside() -> None:
        runtime = BlockingRuntime(call, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="its own event loop"):
            runtime.exec([{"role": "user", "content": "x"}])

    asyncio.run(inside())


def test_extra_chat_hosts_come_from_settings_and_may_not_shadow_built_ins() -> None:
    settings = Settings(
        _env_file=None,
        chat_hosts={"vllm": ChatHost(base_url="http://127.0.0.1:8000", models=["qwen"])},
    )
    registry = RuntimeRegistry.from_settings(settings)
    assert registry.get("vllm").config.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert registry.check("vllm", "llama")[0].field == "runtime.model"
    assert registry.check("openrouter", None)[0].field == "runtime.model"  # no default model
    assert registry.check("faux", None) == []
    from shared.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        RuntimeRegistry.from_settings(
            Settings(_env_file=None, chat_hosts={"openai": ChatHost(base_url="http://x")})
        )


async def test_faux_tool_calls_are_scripted(tmp_path: object) -> None:
    faux = FauxProvider()
    faux.chat.script(FauxChatReply(tool_calls=[FauxToolCall(name="lookup", arguments="{broken")]))
    registry = RuntimeRegistry.from_settings(
        Settings(_env_file=None), faux_transport=faux.transport()
    )
    reply = await registry.get("faux").exec(MESSAGES, deadline=deadline())
    assert reply.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("lookup", "{broken")]
    faux.update_behaviour(mode="refuse")
    refused = await registry.get("faux").exec(MESSAGES, deadline=deadline())
    assert refused.refused
    faux.set_behaviour(FauxBehaviour())
