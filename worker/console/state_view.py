"""A job's state as a reviewer sees it: pretty JSON text, and the images it carries.

A state is untrusted input. It is only ever rendered as text (the templates autoescape);
images are shown only from ``data:`` URLs of raster formats whose bytes really start as
that format says (no SVG, which can carry script), rebuilt from the decoded bytes rather
than echoed, and from the ``assets`` an escalation may carry for ``<key>`` tokens.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MAX_IMAGES", "StateImage", "pretty_json", "state_images"]

MAX_IMAGES: Final = 24
_MAX_IMAGE_BYTES: Final = 16 * 1024 * 1024
_DATA_URL = re.compile(r"^data:image/(png|jpeg|gif|webp);base64,([A-Za-z0-9+/\s]+={0,2})$")
_TOKEN = re.compile(r"<([A-Za-z0-9_.\-]{1,64})>")
_ELIDE_OVER: Final = 120


@dataclass(frozen=True)
class StateImage:
    """An image found in the state or a question: where (a JSON path or asset token) and a
    safe data URL; or, for an image kept in a store, its ``ref`` (shown as text, never
    loaded by the reviewer's browser)."""

    where: str
    src: str
    size_bytes: int
    ref: str | None = None


def pretty_json(value: Any) -> str:
    """Indented JSON, with long ``data:`` URLs shortened (the images are shown apart)."""
    return json.dumps(_elide(value), indent=2, ensure_ascii=False, default=str)


def _elide(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("data:") and len(value) > _ELIDE_OVER:
        head = value.split(",", 1)[0]
        return f"{head},… ({len(value)} characters, shown below)"
    if isinstance(value, dict):
        return {k: _elide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide(v) for v in value]
    return value


def state_images(state: Any, assets: Any = None, questions: Any = None) -> list[StateImage]:
    """Images of the state, then those the questions reference by token (Jev reads a token
    in a question too), in document order, each asset once, at most ``MAX_IMAGES``."""
    found: list[StateImage] = []
    carried = assets if isinstance(assets, Mapping) else {}
    shown: set[str] = set()
    for where, text in _strings(state, "state"):
        image = _from_data_url(where, text)
        if image is not None:
            found.append(image)
        found.extend(_tokens(text, carried, shown))
        if len(found) >= MAX_IMAGES:
            return found[:MAX_IMAGES]
    for _where, text in _keys_and_strings(questions):
        found.extend(_tokens(text, carried, shown))
        if len(found) >= MAX_IMAGES:
            return found[:MAX_IMAGES]
    return found


def _tokens(text: str, carried: Mapping[str, Any], shown: set[str]) -> Iterator[StateImage]:
    for key in _TOKEN.findall(text):
        if key in shown:
            continue
        asset = _from_asset(f"<{key}>", carried.get(key))
        if asset is not None:
            shown.add(key)
            yield asset


def _keys_and_strings(value: Any) -> Iterator[tuple[str, str]]:
    """Every string of the questions, object keys included (a criteria key can be a token)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield "", str(key)
            yield from _keys_and_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys_and_strings(item)
    elif isinstance(value, str):
        yield "", value


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def _from_data_url(where: str, text: str) -> StateImage | None:
    match = _DATA_URL.match(text.strip())
    if match is None:
        return None
    return _image(where, match.group(1), match.group(2))


def _from_asset(where: str, asset: Any) -> StateImage | None:
    if not isinstance(asset, Mapping):
        return None
    fmt, data, ref = asset.get("format"), asset.get("data_base64"), asset.get("ref")
    if isinstance(ref, str) and data is None:
        # The escalation keeps a store's ref, not its bytes: the reviewer is told where it is.
        return StateImage(where=where, src="", size_bytes=0, ref=ref)
    if not isinstance(fmt, str) or not isinstance(data, str):
        return None
    return _image(where, fmt, data)


_MAGIC: Final = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
}


def _image(where: str, fmt: str, data: str) -> StateImage | None:
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) > _MAX_IMAGE_BYTES or not _is_format(raw, fmt):
        return None
    src = f"data:image/{fmt};base64,{base64.b64encode(raw).decode('ascii')}"
    return StateImage(where=where, src=src, size_bytes=len(raw))


def _is_format(raw: bytes, fmt: str) -> bool:
    if fmt == "webp":
        return raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"
    return any(raw.startswith(magic) for magic in _MAGIC.get(fmt, ()))
