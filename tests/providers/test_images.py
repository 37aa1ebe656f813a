"""Images (experimental): tokens, placement per model, sizes, and the shared catalog read."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import httpx
import pytest
from PIL import Image

from shared.errors import DecisionProviderError
from shared.settings import Settings
from worker.providers import (
    DecisionRequest,
    ModelCatalog,
    SystemOneConfig,
    SystemOneProvider,
    is_jev,
    plan_images,
)
from worker.providers.images import DANGER_ZONE_IMAGES_HEADER
from worker.testing.faux import FauxProvider

from .support import FAST, deadline


def png(width: int = 400, height: int = 300) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


def jpeg(width: int = 400, height: int = 300) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 10, 200)).save(out, format="JPEG")
    return out.getvalue()


NOUL = {"q": {"type": "noul", "instructions": "Do the images match?"}}


def _plan(state: Any, assets: dict[str, bytes], model: str, qs: Any = None) -> Any:
    return plan_images(state, qs or NOUL, assets, model=model, provider="t")


def _refused(
    state: Any, assets: dict[str, bytes], model: str, qs: Any = None
) -> DecisionProviderError:
    with pytest.raises(DecisionProviderError) as info:
        _plan(state, assets, model, qs)
    assert info.value.code == "invalid_request"
    return info.value


def test_jev_detection() -> None:
    assert is_jev("jev-latest") and is_jev("typesafe/jev-1.14") and is_jev("jev-1.13.0")
    assert (
        not is_jev("liquid/d1")
        and not is_jev("faux-1")
        and not is_jev("jevons")
        and not is_jev(None)
    )


def test_object_state_is_reshaped_for_other_models() -> None:
    state = {"invoice": "<i1>", "note": "compare", "receipt": "<i2>"}
    plan = _plan(state, {"i1": png(), "i2": jpeg()}, "liquid/d1")
    assert plan.state == [
        {"note": "compare", "image_fields": ["invoice", "receipt"]},
        "<i1>",
        "<i2>",
    ]
    assert plan.assets["i1"]["format"] == "png" and plan.assets["i2"]["format"] == "jpeg"
    assert base64.b64decode(plan.assets["i1"]["data_base64"]) == png()
    assert plan.assets["i1"]["type"] == "image"


def test_seed_example_reshapes_exactly() -> None:
    plan = _plan({"invoice": "<i1>", "receipt": "<i2>"}, {"i1": png(), "i2": png()}, "liquid/d1")
    assert plan.state == [{"image_fields": ["invoice", "receipt"]}, "<i1>", "<i2>"]


def test_array_state_with_whole_tokens_goes_as_is() -> None:
    state = ["look at these", "<i1>", "<i2>"]
    assert _plan(state, {"i1": png(), "i2": png()}, "liquid/d1").state == state


@pytest.mark.parametrize(
    ("state", "qs", "field"),
    [
        ({"doc": {"scan": "<i1>"}}, None, "state.doc.scan"),
        ({"doc": "see <i1> here"}, None, "state.doc"),
        (["see <i1>"], None, "state.0"),
        ("<i1>", None, "state"),
        (
            ["x"],
            {"q": {"type": "noul", "instructions": "is <i1> red?"}},
            "questions.q.instructions",
        ),
    ],
)
def test_token_anywhere_else_is_refused_for_other_models(state: Any, qs: Any, field: str) -> None:
    assert _refused(state, {"i1": png()}, "liquid/d1", qs).field == field


def test_jev_reads_tokens_anywhere() -> None:
    qs = {
        "q": {
            "type": "choice",
            "instructions": "which of <i1>?",
            "criteria": {"<i2>": None, "other": "not the second image"},
        }
    }
    state = {"doc": "see <i1> here"}
    plan = _plan(state, {"i1": png(), "i2": png()}, "typesafe/jev-1.14", qs)
    assert plan.state == state


@pytest.mark.parametrize(
    ("w", "h", "ok"), [(280, 280, True), (1568, 1568, True), (1569, 400, False), (400, 279, False)]
)
def test_jev_side_limits(w: int, h: int, ok: bool) -> None:
    if ok:
        _plan(["<i1>"], {"i1": png(w, h)}, "jev-latest")
    else:
        error = _refused(["<i1>"], {"i1": png(w, h)}, "jev-latest")
        assert error.field == "assets.i1" and f"{w}x{h}" in str(error)


def test_other_models_are_not_held_to_jev_sides() -> None:
    _plan(["<i1>"], {"i1": png(2000, 100)}, "liquid/d1")


@pytest.mark.parametrize(
    ("assets", "field"),
    [
        ({"i1": b"GIF89a...."}, "assets.i1"),
        ({"i1": b"\x89PNG\r\n\x1a\nbroken"}, "assets.i1"),
        ({"bad key": png()}, "assets"),
        ({"i1": png(), "i2": png()}, "assets.i2"),
        ({}, "assets"),
    ],
    ids=["not-png-or-jpeg", "unreadable", "bad-key", "unreferenced", "empty"],
)
def test_bad_assets_are_refused(assets: dict[str, bytes], field: str) -> None:
    assert _refused(["<i1>"], assets, "jev-latest").field == field


def test_image_fields_name_clash_is_refused() -> None:
    error = _refused({"image_fields": "x", "a": "<i1>"}, {"i1": png()}, "liquid/d1")
    assert error.field == "state.image_fields"


# --- the provider and the catalog ------------------------------------------------------------


class Counting(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, catalog_delay: float = 0.0) -> None:
        self.inner = inner
        self.catalog_delay = catalog_delay
        self.catalog_reads = 0
        self.fail_catalog = 0
        self.decisions: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        if request.url.path.endswith("/models"):
            self.catalog_reads += 1
            assert request.url.params["output_modalities"] == "decisions"
            if self.fail_catalog:
                self.fail_catalog -= 1
                raise httpx.ConnectError("refused", request=request)
            await asyncio.sleep(self.catalog_delay)
        else:
            self.decisions.append(request)
        return await self.inner.handle_async_request(request)


def _openrouter(transport: Counting, **config: Any) -> SystemOneProvider:
    settings = Settings(openrouter_base_url="http://faux.invalid/api")
    base = SystemOneConfig.openrouter(settings)
    cfg = SystemOneConfig(**{**base.__dict__, **config})
    return SystemOneProvider(cfg, http=httpx.AsyncClient(transport=transport), policy=FAST)


def _request(model: str, state: Any = None) -> DecisionRequest:
    return DecisionRequest(
        state=state or {"invoice": "<i1>", "receipt": "<i2>"},
        questions=NOUL,
        model=model,
        assets={"i1": png(), "i2": jpeg()},
    )


@pytest.mark.usefixtures("keys")
async def test_images_go_as_openrouter_takes_them() -> None:
    wire = Counting(FauxProvider().transport())
    provider = _openrouter(wire)
    result = await provider.decide(_request("typesafe/jev-1.14"), deadline())
    sent = wire.decisions[0]
    assert sent.headers[DANGER_ZONE_IMAGES_HEADER] == "true"
    body = json.loads(sent.content)
    assert set(body["assets"]) == {"i1", "i2"}
    assert body["state"] == {"invoice": "<i1>", "receipt": "<i2>"}, "Jev reads tokens in place"
    assert result.receipt.status == "answered"
    assert provider.experimental_inputs == ("image",)


@pytest.mark.usefixtures("keys")
async def test_model_without_image_input_is_refused_before_the_paid_request() -> None:
    wire = Counting(FauxProvider().transport())
    provider = _openrouter(wire)
    with pytest.raises(DecisionProviderError) as info:
        await provider.decide(_request("liquid/d1"), deadline())
    assert (info.value.code, info.value.field) == ("invalid_request", "model")
    assert wire.decisions == [] and wire.catalog_reads == 1
    assert info.value.receipt.status == "failed" and info.value.receipt.transport_attempts == 0


@pytest.mark.usefixtures("keys")
async def test_override_beats_the_catalog() -> None:
    wire = Counting(FauxProvider().transport())
    provider = _openrouter(wire, image_models={"typesafe/jev-1.14": False})
    with pytest.raises(DecisionProviderError):
        await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert wire.catalog_reads == 0 and wire.decisions == []


@pytest.mark.usefixtures("keys")
async def test_catalog_is_read_once_for_concurrent_requests() -> None:
    wire = Counting(FauxProvider().transport(), catalog_delay=0.2)
    provider = _openrouter(wire)
    results = await asyncio.gather(
        *(
            provider.decide(
                _request("typesafe/jev-1.14", {"n": str(i), "a": "<i1>", "b": "<i2>"}), deadline()
            )
            for i in range(5)
        )
    )
    assert wire.catalog_reads == 1 and len(wire.decisions) == 5
    assert all(r.receipt.status == "answered" for r in results)
    await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert wire.catalog_reads == 1, "cached for the requests after it"


@pytest.mark.usefixtures("keys")
async def test_a_short_deadline_does_not_cut_the_shared_catalog_read() -> None:
    wire = Counting(FauxProvider().transport(), catalog_delay=0.5)
    provider = _openrouter(wire)
    with pytest.raises(DecisionProviderError) as info:
        await provider.decide(_request("typesafe/jev-1.14"), deadline(0.1))
    assert info.value.code == "timeout" and info.value.receipt.status == "not_sent"
    assert wire.decisions == []
    # The read went on; the next request finds it done (or waits for the same read).
    result = await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert result.receipt.status == "answered"
    assert wire.catalog_reads == 1


@pytest.mark.usefixtures("keys")
async def test_cancel_while_waiting_for_the_catalog_is_aborted_and_the_read_goes_on() -> None:
    wire = Counting(FauxProvider().transport(), catalog_delay=0.3)
    provider = _openrouter(wire)
    task = asyncio.create_task(provider.decide(_request("typesafe/jev-1.14"), deadline()))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(DecisionProviderError) as info:
        await task
    assert info.value.code == "aborted"
    await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert wire.catalog_reads == 1 and len(wire.decisions) == 1


@pytest.mark.usefixtures("keys")
async def test_a_failed_catalog_read_is_retried_by_the_next_request() -> None:
    wire = Counting(FauxProvider().transport())
    wire.fail_catalog = 1
    provider = _openrouter(wire)
    with pytest.raises(DecisionProviderError) as info:
        await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert info.value.code == "connection" and wire.decisions == []
    assert info.value.receipt.status == "not_sent"
    await provider.decide(_request("typesafe/jev-1.14"), deadline())
    assert wire.catalog_reads == 2 and len(wire.decisions) == 1


async def test_catalog_read_has_its_own_timeout() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json={"data": []})

    http = httpx.AsyncClient(transport=httpx.MockTransport(slow))
    catalog = ModelCatalog(http, "http://x/v1/models", provider="t", timeout_s=0.1)
    with pytest.raises(DecisionProviderError) as info:
        await catalog.input_modalities("m", wait_s=2)
    assert info.value.code == "connection"


def test_typesafe_direct_takes_no_image_assets() -> None:
    provider = SystemOneProvider(
        SystemOneConfig.typesafe(Settings()), http=httpx.AsyncClient(), policy=FAST
    )
    with pytest.raises(DecisionProviderError) as info:
        provider.prepare(_request("jev-latest"))
    assert info.value.field == "assets"


# Found by an attack: a catalog nested deeper than the parser goes escaped as RecursionError,
# a bug to the delivery, which booked the request (never sent) unknown.
@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"data":' + b"[" * 100_000])
def test_a_catalog_nested_too_deep_is_a_catalog_that_could_not_be_read(body: bytes) -> None:
    async def scenario() -> BaseException | None:
        http = httpx.AsyncClient(
            transport=httpx.MockTransport(lambda _r: httpx.Response(200, content=body))
        )
        catalog = ModelCatalog(http, "http://host/v1/models", provider="openrouter")
        try:
            await catalog.input_modalities("m", wait_s=2)
        except BaseException as exc:  # what escapes is what the test is about
            return exc
        finally:
            await http.aclose()
        return None

    raised = asyncio.run(scenario())
    assert isinstance(raised, DecisionProviderError), repr(raised)
    assert raised.code == "connection"  # nothing was sent: it may be tried again
