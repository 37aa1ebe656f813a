"""A strict host's answers to bad requests: status, envelope, and no key in the body."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from typing import Any

import httpx
import pytest
from PIL import Image

from shared.canonical import canonical_bytes
from worker.testing.faux import FauxProvider

from .conftest import openai_body, post, system_one_body


def png(width: int = 300, height: int = 300) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def parallel_body() -> dict[str, Any]:
    body = system_one_body()
    del body["model"]
    return body


@pytest.mark.parametrize(
    ("path", "body", "envelope_key"),
    [
        ("/v1/systemone", system_one_body(), "detail"),
        ("/api/v1/systemone", system_one_body(), "error"),
        ("/v1/decisions", parallel_body(), "error"),
        ("/v1/decisions", openai_body(), "error"),
    ],
)
@pytest.mark.parametrize("auth", [None, "", "Bearer ", "Basic abc"])
def test_missing_key_is_401(
    client: httpx.Client, provider: FauxProvider, path: str, body: Any, envelope_key: str,
    auth: str | None,
) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    raw = canonical_bytes(body)
    response = client.post(path, content=raw, headers=headers)
    assert response.status_code == 401
    assert envelope_key in response.json()
    assert provider.total() == 1  # a refused request was still read: it counts


def test_parallel_takes_an_api_key_header(client: httpx.Client) -> None:
    response = post(client, "/v1/decisions", parallel_body(), headers={"Authorization": "",
                                                                     "x-api-key": "secret"})
    assert response.status_code == 200
    assert post(client, "/v1/systemone", system_one_body(),
                headers={"Authorization": "", "x-api-key": "k"}).status_code == 401


def test_the_key_never_comes_back(client: httpx.Client) -> None:
    secret = "sk-super-secret-123"
    bad = system_one_body(state=12)
    for path in ("/v1/systemone", "/api/v1/systemone", "/v1/decisions"):
        response = post(client, path, bad, headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code in (400, 422)
        assert secret not in response.text and secret not in str(response.headers)


def test_typesafe_validation_is_422_in_detail_envelope(client: httpx.Client) -> None:
    body = system_one_body()
    body["questions"]["frustration"]["criteria"] = ["only one level"]
    response = post(client, "/v1/systemone", body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail["error_type"] == "validation_error"
    assert detail["loc"] == ["questions", "frustration", "criteria"]


def test_openrouter_validation_is_400_in_error_envelope(client: httpx.Client) -> None:
    response = post(client, "/api/v1/systemone", system_one_body(state=None))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == 400 and error["metadata"]["loc"] == ["state"]


def test_parallel_validation_is_400_with_ref_id(client: httpx.Client) -> None:
    body = parallel_body()
    body["questions"]["department"]["criteria"] = {"billing": None}  # Parallel needs 2+
    response = post(client, "/v1/decisions", body)
    assert response.status_code == 400
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["ref_id"].startswith("ref_")
    # The same single-option choice is fine on a System One host (1 to 255).
    assert post(client, "/v1/systemone", {**body, "model": "m"}).status_code == 200


def test_openai_validation_is_400_in_openai_envelope(client: httpx.Client) -> None:
    body = openai_body()
    body["questions"][1]["name"] = "is_urgent"  # duplicate name
    response = post(client, "/v1/decisions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "questions.1.name"


def _mutate(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("state",), 3),
        (("state",), True),
        (("state",), KeyError),
        (("questions",), {}),
        (("questions",), []),
        (("questions",), KeyError),
        (("questions", "is_urgent", "type"), "box"),
        (("questions", "is_urgent", "instructions"), "  "),
        (("questions", "is_urgent", "instructions"), KeyError),
        (("questions", "is_urgent", "criteria"), {"maybe": "x"}),
        (("questions", "is_urgent", "escalate_below"), 0.5),  # routing field leaked
        (("questions", "department", "criteria"), {}),
        (("questions", "department", "criteria"), {f"o{i}": None for i in range(256)}),
        (("questions", "department", "criteria"), ["billing", "sales"]),
        (("questions", "department", "criteria", "sales"), 3),
        (("questions", "frustration", "criteria"), [f"l{i}" for i in range(11)]),
        (("questions", "frustration", "criteria"), ["a", 2]),
        (("model",), ""),
        (("stream",), True),
    ],
)
def test_malformed_system_one_requests_are_422(
    client: httpx.Client, path: tuple[Any, ...], value: Any
) -> None:
    response = post(client, "/v1/systemone", _mutate(system_one_body(), path, value))
    assert response.status_code == 422, response.text
    assert "message" in response.json()["detail"]


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"state": NaN}', b"\xff\xfe"])
def test_bodies_that_are_not_requests(client: httpx.Client, raw: bytes) -> None:
    assert post(client, "/v1/systemone", raw).status_code == 422
    assert post(client, "/api/v1/systemone", raw).status_code == 400
    assert post(client, "/v1/decisions", raw).status_code == 400


def test_parallel_limits(client: httpx.Client) -> None:
    body = parallel_body()
    question = body["questions"]["is_urgent"]
    body["questions"] = {f"q{i}": question for i in range(100)}
    assert post(client, "/v1/decisions", body).status_code == 200
    body["questions"]["q100"] = question
    assert post(client, "/v1/decisions", body).status_code == 400
    assert post(client, "/v1/decisions", {**parallel_body(), "mode": "slow"}).status_code == 400


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("model",), KeyError),
        (("input",), KeyError),
        (("input",), [{"role": "system", "content": "x"}]),
        (("input",), [{"role": "user", "content": [{"type": "audio"}]}]),
        (("questions",), []),
        (("questions", 0, "type"), "noul"),
        (("questions", 0, "criteria"), {"true": "x"}),
        (("questions", 1, "choices"), [{"value": "only"}]),
        (("questions", 1, "choices", 1, "value"), "billing"),
        (("questions", 1, "choices", 1, "value"), 3),
        (("questions", 2, "levels"), [{"label": "one"}]),
        (("questions", 2, "levels", 0), {"name": "Calm"}),
    ],
)
def test_malformed_openai_requests_are_400(
    client: httpx.Client, path: tuple[Any, ...], value: Any
) -> None:
    response = post(client, "/v1/decisions", _mutate(openai_body(), path, value))
    assert response.status_code == 400, response.text
    assert "message" in response.json()["error"]


def test_openai_message_input_is_accepted(client: httpx.Client) -> None:
    body = openai_body(input=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    assert post(client, "/v1/decisions", body).status_code == 200


def test_a_body_over_32_mib_is_413(client: httpx.Client) -> None:
    body = system_one_body(state="x" * (32 * 1024 * 1024))
    response = post(client, "/v1/systemone", body)
    assert response.status_code == 413
    assert response.json()["detail"]["error_type"] == "request_too_large"


# --- images ------------------------------------------------------------------------------

IMAGES = {"TypeSafe-Danger-Zone-Images": "true"}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


#: A PNG whose IHDR's length says 1 (Pillow: ValueError "Truncated IHDR chunk"), and a
#: 68-byte PNG claiming 40000 x 40000 px (Pillow: DecompressionBombError).
TRUNCATED_IHDR = base64.b64encode(
    bytes.fromhex("89504e470d0a1a0a00000001494844520000002800" "00001e0802000000d1bfcb8a")
).decode()
PNG_BOMB = base64.b64encode(
    b"\x89PNG\r\n\x1a\n"
    + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 40_000, 40_000, 8, 2, 0, 0, 0))
    + _png_chunk(b"IDAT", zlib.compress(b"\0" * 10))
    + _png_chunk(b"IEND", b"")
).decode()


def image_body(model: str = "typesafe/jev-1.14", **assets: Any) -> dict[str, Any]:
    body = system_one_body(model=model, state={"note": "see <i1>", "other": "<i2>"})
    body["assets"] = assets or {
        "i1": {"type": "image", "format": "png", "data_base64": png()},
        "i2": {"type": "image", "format": "png", "data_base64": png(400, 290)},
    }
    return body


def test_images_to_an_image_model_with_the_header(client: httpx.Client) -> None:
    assert post(client, "/api/v1/systemone", image_body(), headers=IMAGES).status_code == 200
    direct = post(client, "/v1/systemone", image_body("jev-latest"), headers=IMAGES)
    assert direct.status_code == 200


def test_images_need_the_danger_zone_header(client: httpx.Client) -> None:
    response = post(client, "/api/v1/systemone", image_body())
    assert response.status_code == 400
    assert "typesafe-danger-zone-images" in response.json()["error"]["message"]


def test_images_need_an_image_capable_model(client: httpx.Client) -> None:
    response = post(client, "/api/v1/systemone", image_body("liquid/d1"), headers=IMAGES)
    assert response.status_code == 400
    assert response.json()["error"]["metadata"]["loc"] == ["model"]
    unknown = post(client, "/api/v1/systemone", image_body("someone/else"), headers=IMAGES)
    assert unknown.status_code == 400


def test_an_unreferenced_asset_is_400(client: httpx.Client) -> None:
    body = image_body()
    body["assets"]["i3"] = body["assets"]["i1"]
    response = post(client, "/api/v1/systemone", body, headers=IMAGES)
    assert response.status_code == 400
    assert response.json()["error"]["metadata"]["loc"] == ["assets", "i3"]


def test_a_token_in_a_question_references_too(client: httpx.Client) -> None:
    body = image_body()
    body["state"] = "no tokens here"
    body["questions"]["is_urgent"]["instructions"] = "Look at <i1>."
    body["questions"]["department"]["criteria"]["<i2>"] = "the pictured team"
    assert post(client, "/api/v1/systemone", body, headers=IMAGES).status_code == 200
    body["questions"]["is_urgent"]["instructions"] = "Look at i1."  # a bare word is no token
    assert post(client, "/api/v1/systemone", body, headers=IMAGES).status_code == 400


@pytest.mark.parametrize(
    "asset",
    [
        {"type": "image", "format": "gif", "data_base64": png()},
        {"type": "image", "format": "jpeg", "data_base64": png()},  # PNG bytes called jpeg
        {"type": "image", "format": "png", "data_base64": "%%% not base64"},
        {"type": "image", "format": "png"},
        {"type": "file", "format": "png", "data_base64": png()},
        {"type": "image", "format": "png", "data_base64": png(200, 300)},  # Jev: too small
        {"type": "image", "format": "png", "data_base64": png(1600, 300)},  # Jev: too large
        # Headers Pillow raised ValueError and DecompressionBombError for (a 500 before).
        {"type": "image", "format": "png", "data_base64": TRUNCATED_IHDR},
        {"type": "image", "format": "png", "data_base64": PNG_BOMB},
    ],
)
def test_bad_assets_are_400(client: httpx.Client, asset: dict[str, Any]) -> None:
    body = image_body(i1=asset, i2={"type": "image", "format": "png", "data_base64": png()})
    assert post(client, "/api/v1/systemone", body, headers=IMAGES).status_code == 400


def test_size_limits_are_jevs_only(client: httpx.Client) -> None:
    small = {"type": "image", "format": "png", "data_base64": png(64, 64)}
    body = image_body("faux-1", i1=small, i2=small)
    body["state"] = [{"note": "compare", "image_fields": ["a", "b"]}, "<i1>", "<i2>"]
    assert post(client, "/api/v1/systemone", body, headers=IMAGES).status_code == 200


@pytest.mark.parametrize(
    ("state", "instructions", "loc"),
    [
        ({"a": "<i1>", "b": "<i2>"}, None, ["state", "a"]),  # an object state: not reshaped
        (["<i1>", {"nested": "<i2>"}], None, ["state", 1, "nested"]),
        (["<i1>", "see <i2>"], None, ["state", 1]),  # inside a longer string
        (["<i1>", "<i2>", "text"], "Compare <i1>.", ["questions", "is_urgent", "instructions"]),
    ],
)
def test_other_models_read_images_only_as_top_level_array_items(
    client: httpx.Client, state: Any, instructions: str | None, loc: list[Any]
) -> None:
    body = image_body("faux-1")
    body["state"] = state
    if instructions is not None:
        body["questions"]["is_urgent"]["instructions"] = instructions
    response = post(client, "/api/v1/systemone", body, headers=IMAGES)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["metadata"]["loc"] == loc and "top-level item" in error["message"]
    # Jev reads the same tokens anywhere.
    body["model"] = "typesafe/jev-1.14"
    assert post(client, "/api/v1/systemone", body, headers=IMAGES).status_code == 200


def test_image_errors_are_400_even_on_typesafe(client: httpx.Client) -> None:
    response = post(client, "/v1/systemone", image_body("jev-latest"))
    assert response.status_code == 400
    assert "detail" in response.json()
