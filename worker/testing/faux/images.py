"""Image assets as OpenRouter takes them (experimental): checked, never looked at.

A request with ``assets`` (``{key: {"type": "image", "format": "png"|"jpeg",
"data_base64": ...}}``) needs the danger-zone header, an image-capable model, images of at
most 16 MiB (and, for Jev, 280 to 1568 px a side: Jev does not resize), and every key
referenced by a token from the state, the instructions or the criteria; anything else is a
400, as the hosts answer. A model other than Jev reads an image only as a top-level item of
an array state: a token anywhere else (an object state, nested, inside a longer string, in a
question) is a 400 naming where, so a worker that places one wrongly fails its tests.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator, Mapping
from typing import Any, Final

from . import wire
from .catalog import is_jev, takes_images
from .validate import RequestProblem

__all__ = ["MAX_IMAGE_BYTES", "MAX_SIDE_PX", "MIN_SIDE_PX", "check_images", "references"]

MIN_SIDE_PX: Final = 280
MAX_SIDE_PX: Final = 1568
MAX_IMAGE_BYTES: Final = 16 * 1024 * 1024

_MAGIC: Final = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, object keys included (a criteria key can be a token)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def references(key: str, text: str) -> bool:
    """Whether ``text`` is a token for asset ``key``.

    The token syntax is *unconfirmed*: the seed writes tokens as ``"<i1>"``. The faux takes
    the key itself as a whole string, or ``<key>`` anywhere in a string, or the key anywhere
    when the key is itself written ``<...>``.
    """
    if text == key or f"<{key}>" in text:
        return True
    return key.startswith("<") and key.endswith(">") and key in text


def _located(value: Any, loc: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every string of a JSON value with where it stands (an object key at its own place)."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield (*loc, key), key
            yield from _located(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _located(item, (*loc, i))


def _check_placement(body: Mapping[str, Any], model: str, keys: list[str]) -> None:
    """Not Jev: a token stands only as a whole top-level item of an array state."""
    state = body["state"]
    places = list(_located(state, ("state",)))
    for qid, question in body["questions"].items():
        for name in ("instructions", "criteria"):
            places += _located(question.get(name), ("questions", qid, name))
    for loc, text in places:
        if not any(references(key, text) for key in keys):
            continue
        whole = text in keys or any(text == f"<{key}>" for key in keys)
        if isinstance(state, list) and len(loc) == 2 and whole:
            continue
        raise RequestProblem(
            f"model {model!r} reads an image only as a top-level item of an array state", loc
        )


def _referencing_strings(body: Mapping[str, Any]) -> list[str]:
    found = list(_strings(body["state"]))
    for question in body["questions"].values():
        found.extend(_strings(question.get("instructions")))
        found.extend(_strings(question.get("criteria")))
    return found


def _check_image(key: str, asset: Any, *, jev: bool) -> None:
    loc = ("assets", key)
    if not isinstance(asset, dict) or asset.get("type") != "image":
        raise RequestProblem("an asset is {type: image, format, data_base64}", loc)
    fmt = asset.get("format")
    if fmt not in _MAGIC:
        raise RequestProblem("format must be png or jpeg", (*loc, "format"))
    data_b64 = asset.get("data_base64")
    if not isinstance(data_b64, str):
        raise RequestProblem("data_base64 is required", (*loc, "data_base64"))
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        raise RequestProblem("data_base64 is not base64", (*loc, "data_base64")) from None
    if len(data) > MAX_IMAGE_BYTES:
        raise RequestProblem("image over 16 MiB", loc)
    if not data.startswith(_MAGIC[fmt]):
        raise RequestProblem(f"data is not a {fmt} image", loc)
    width, height = _size(data, loc)
    if jev and not (MIN_SIDE_PX <= width <= MAX_SIDE_PX and MIN_SIDE_PX <= height <= MAX_SIDE_PX):
        raise RequestProblem(
            f"image is {width}x{height}; each side must be {MIN_SIDE_PX} to {MAX_SIDE_PX} px",
            loc,
        )


def _size(data: bytes, loc: tuple[str, ...]) -> tuple[int, int]:
    # Imported here: only image requests pay for Pillow.
    from PIL import Image

    # What Pillow raises for a damaged header is open-ended (ValueError, SyntaxError, its
    # bomb error...): a host answers 400 for any image it cannot read, never a 500.
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except Exception:
        raise RequestProblem("image cannot be read", loc) from None


def check_images(body: Mapping[str, Any], headers: Mapping[str, str], model: str | None) -> None:
    """Raise ``RequestProblem`` unless the request's assets (if any) would be accepted."""
    assets = body.get("assets")
    if assets is None:
        return
    if not isinstance(assets, dict) or not assets:
        raise RequestProblem("assets must be a non-empty object", ("assets",))
    if headers.get(wire.DANGER_ZONE_IMAGES_HEADER, "").strip().lower() != "true":
        raise RequestProblem(
            f"image assets need the {wire.DANGER_ZONE_IMAGES_HEADER}: true header", ("assets",)
        )
    model = model or wire.DEFAULT_MODEL
    if not takes_images(model):
        raise RequestProblem(f"model {model!r} does not take image input", ("model",))
    texts = _referencing_strings(body)
    jev = is_jev(model)
    for key, asset in assets.items():
        _check_image(key, asset, jev=jev)
        if not any(references(key, text) for text in texts):
            raise RequestProblem("asset is not referenced by any token", ("assets", key))
    if not jev:
        _check_placement(body, model, list(assets))
