"""Images in decision requests (experimental), as OpenRouter takes them.

Token syntax. A request carries ``assets``: a map of *key* to PNG or JPEG bytes. An image is
referenced by the token ``<key>`` (angle brackets around an asset key, the seed's
``"<i1>"``), in the state or in a question's instructions or criteria. A ``<...>`` whose
inside is not an asset key is plain text. Keys are 1 to 64 of ``A-Z a-z 0-9 _ . -``.

On the wire the tokens stay as written and the images go in the JSON body as ``assets:
{key: {"type": "image", "format": "png"|"jpeg", "data_base64": ...}}`` with the header
``TypeSafe-Danger-Zone-Images: true`` (OpenRouter takes JSON only).

Where a token may stand depends on the model:

- Jev (``jev-...``, ``typesafe/jev-...``) reads a token anywhere in the state or a question,
  and refuses an image outside 280 to 1568 px a side; the provider refuses it first.
- Every other model reads an image only as a top-level item of an array state. An array
  state whose tokens are whole items goes as it is; an object state whose tokens are whole
  top-level values goes as ``[{other fields..., "image_fields": [field, ...]}, "<t1>", ...]``,
  ``image_fields`` naming, in order, the field each image stood in. A token anywhere else
  (nested, inside a longer string, in a question) is refused before sending.

Every asset must be referenced (hosts answer an unreferenced one with a 400), and the model
must take images: that is the catalog's word (``ModelCatalog``), checked at send time
before the paid request, unless an override says so.
"""

from __future__ import annotations

import base64
import io
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from shared.errors import DecisionProviderError
from shared.images import PILLOW_MISSING
from shared.limits import MAX_IMAGE_BYTES

__all__ = [
    "DANGER_ZONE_IMAGES_HEADER",
    "IMAGE_FIELDS_KEY",
    "JEV_MAX_SIDE_PX",
    "JEV_MIN_SIDE_PX",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "ImagePlan",
    "is_jev",
    "plan_images",
    "token",
]

DANGER_ZONE_IMAGES_HEADER: Final = "TypeSafe-Danger-Zone-Images"
IMAGE_FIELDS_KEY: Final = "image_fields"
JEV_MIN_SIDE_PX: Final = 280
JEV_MAX_SIDE_PX: Final = 1568
#: The most pixels (width x height, as the header says) an image may claim, checked before
#: Pillow opens it. Jev takes at most 1568 px a side; the largest input any vision model
#: documents is 8000 x 8000 px (Anthropic's), and the other hosts scale a larger image down
#: before a model sees it. It stays under Pillow's own bomb threshold (about 89 megapixels:
#: a warning, twice that an error), so an image that passes here never trips Pillow's.
MAX_IMAGE_PIXELS: Final = 8000 * 8000

_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_JEV = re.compile(r"(^|/)jev(-|$)")
_MAGIC: Final[dict[str, bytes]] = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}

ImageFormat = Literal["png", "jpeg"]


def token(key: str) -> str:
    """The token that references asset ``key``."""
    return f"<{key}>"


def is_jev(model: str | None) -> bool:
    return bool(model and _JEV.search(model))


@dataclass(frozen=True)
class ImagePlan:
    """What an image request sends: the (maybe reshaped) state and the ``assets`` JSON."""

    state: Any
    assets: dict[str, dict[str, str]]


def _refuse(provider: str, field: str, message: str) -> DecisionProviderError:
    return DecisionProviderError(
        "invalid_request", f"{field}: {message}; nothing was sent", provider=provider, field=field
    )


class _Unreadable(Exception):
    """An image header that cannot be read (internal: refused by the image's field)."""


# Chunks (PNG) or segments (JPEG) before the pixels, and bytes of fill or junk between JPEG
# segments, that a header may hold. Real images have a few dozen parts at most (an ICC
# profile split into JPEG segments is the longest) and a few bytes of fill; Pillow reads a
# part at a time and junk a byte at a time, so 16 MiB of either kept it busy for seconds.
_MAX_HEADER_PARTS: Final = 1024
_MAX_JPEG_JUNK: Final = 64 * 1024


def _png_sides(data: bytes) -> list[tuple[int, int]]:
    """Every IHDR's width and height before the pixels (IDAT): Pillow takes the last one,
    a well-formed PNG has exactly one, the first chunk."""
    sides: list[tuple[int, int]] = []
    pos = len(_MAGIC["png"])
    for _ in range(_MAX_HEADER_PARTS):
        if pos + 8 > len(data):
            break
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind == b"IDAT":
            return sides
        if kind == b"IHDR":
            if length != 13 or pos + 8 + length > len(data):
                raise _Unreadable
            sides.append(struct.unpack_from(">II", data, pos + 8))
        elif not sides:
            raise _Unreadable  # the first chunk of a PNG is its IHDR
        pos += 12 + length
    raise _Unreadable  # no pixels, or not within the parts a header may hold


# JPEG markers read as Pillow's table (PIL.JpegImagePlugin.MARKER) reads them, so that this
# finds the frames Pillow finds: with no length after them (a stuffed 00, TEM, JPG, RSTn,
# SOI, EOI, where Pillow reads on, and JPGn), and start-of-frame (SOFn: C0 to CF but DHT C4,
# JPG C8 and DAC CC; and DHP DE), whose segment holds the height and width.
_JPEG_STANDALONE: Final = frozenset({0x00, 0x01, 0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)})
_JPEG_FRAMES: Final = frozenset({*range(0xC0, 0xD0), 0xDE}) - {0xC4, 0xC8, 0xCC}
_JPEG_SCAN: Final = 0xDA
_NOT_FF = re.compile(rb"[^\xff]")


def _jpeg_sides(data: bytes) -> list[tuple[int, int]]:
    """Every start-of-frame's width and height before the first scan (the pixels)."""
    sides: list[tuple[int, int]] = []
    pos = len(_MAGIC["jpeg"]) - 1  # the magic's last 0xFF begins the first marker
    junk = 0
    for _ in range(_MAX_HEADER_PARTS):
        fill = data.find(b"\xff", pos)
        found = _NOT_FF.search(data, fill) if fill >= 0 else None
        if found is None:
            break
        at = found.start()  # the marker's byte, after one or more 0xFF
        junk += at - 1 - pos  # junk before the 0xFF and fill bytes: Pillow skips both
        if junk > _MAX_JPEG_JUNK:
            break
        marker = data[at]
        if marker == _JPEG_SCAN:
            return sides
        if marker in _JPEG_STANDALONE:
            pos = at + 1
            continue
        if at + 3 > len(data):
            break
        (length,) = struct.unpack_from(">H", data, at + 1)
        if marker in _JPEG_FRAMES:
            if length < 7 or at + 1 + length > len(data):
                break
            height, width = struct.unpack_from(">HH", data, at + 4)
            sides.append((width, height))
        pos = at + 1 + max(length, 2)  # a length under 2 skips only itself, as in Pillow
    raise _Unreadable  # no pixels, or not within the parts and junk a header may hold


def _claimed_sides(data: bytes, fmt: ImageFormat) -> tuple[int, int]:
    """The largest width and height the header claims, read without Pillow (which would
    refuse a bomb with an error of its own, or only warn of one)."""
    sides = _png_sides(data) if fmt == "png" else _jpeg_sides(data)
    if not sides:
        raise _Unreadable
    width, height = max(sides, key=lambda side: side[0] * side[1])
    if width < 1 or height < 1:
        raise _Unreadable
    return width, height


def _format_and_size(data: bytes, *, provider: str, field: str) -> tuple[ImageFormat, int, int]:
    if len(data) > MAX_IMAGE_BYTES:
        raise _refuse(provider, field, "image over 16 MiB")
    fmt: ImageFormat
    if data.startswith(_MAGIC["png"]):
        fmt = "png"
    elif data.startswith(_MAGIC["jpeg"]):
        fmt = "jpeg"
    else:
        raise _refuse(provider, field, "an image must be PNG or JPEG")
    try:
        width, height = _claimed_sides(data, fmt)
    except _Unreadable:
        raise _refuse(provider, field, "the image cannot be read") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise _refuse(
            provider, field,
            f"image is {width}x{height} px, over the {MAX_IMAGE_PIXELS:,} px any model takes",
        )
    # Imported here: only image requests pay for Pillow, the optional [images] extra;
    # without it the job is refused by this field, before anything is sent.
    try:
        from PIL import Image
    except ImportError:
        raise _refuse(provider, field, PILLOW_MISSING) from None

    # Pillow reads the header only (no pixels are decoded), and what it raises for a
    # damaged one is open-ended (OSError, ValueError, SyntaxError, struct.error, its bomb
    # error...): every failure to read it refuses the image, never the job's run.
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Exception:
        raise _refuse(provider, field, "the image cannot be read") from None
    if width < 1 or height < 1 or width * height > MAX_IMAGE_PIXELS:
        raise _refuse(provider, field, "the image cannot be read")
    return fmt, width, height


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value with its dotted path; object keys included (a criteria
    key can hold a token)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}", str(key)
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}.{i}")


def _occurrences(
    state: Any, questions: Mapping[str, Mapping[str, Any]], keys: list[str]
) -> list[tuple[str, str, str]]:
    """``(path, string, key)`` for every token found."""
    places = list(_strings(state, "state"))
    for qid, question in questions.items():
        places += _strings(question.get("instructions"), f"questions.{qid}.instructions")
        places += _strings(question.get("criteria"), f"questions.{qid}.criteria")
    return [(path, text, key) for path, text in places for key in keys if token(key) in text]


def _top_level_positions(state: Any, keys: list[str]) -> dict[str, str]:
    """The state's paths that hold a whole token as a top-level value or item."""
    items: list[tuple[str, Any]]
    if isinstance(state, dict):
        items = [(f"state.{k}", v) for k, v in state.items()]
    elif isinstance(state, list):
        items = [(f"state.{i}", v) for i, v in enumerate(state)]
    else:
        items = []
    tokens = {token(k): k for k in keys}
    return {
        path: tokens[value] for path, value in items if isinstance(value, str) and value in tokens
    }


def _reshape(state: dict[str, Any], keys: list[str], provider: str) -> list[Any]:
    if IMAGE_FIELDS_KEY in state:
        raise _refuse(
            provider, f"state.{IMAGE_FIELDS_KEY}",
            f"an image state cannot have a field named {IMAGE_FIELDS_KEY}",
        )
    tokens = {token(k) for k in keys}
    image_fields = [
        name for name, value in state.items() if isinstance(value, str) and value in tokens
    ]
    head = {name: value for name, value in state.items() if name not in image_fields}
    head[IMAGE_FIELDS_KEY] = image_fields
    return [head, *(state[name] for name in image_fields)]


def plan_images(
    state: Any,
    questions: Mapping[str, Mapping[str, Any]],
    assets: Mapping[str, bytes],
    *,
    model: str | None,
    provider: str,
) -> ImagePlan:
    """Check the images and where their tokens stand for ``model``; raise ``invalid_request``."""
    if not assets:
        raise _refuse(provider, "assets", "assets must not be empty")
    jev = is_jev(model)
    wire: dict[str, dict[str, str]] = {}
    for key, data in assets.items():
        field = f"assets.{key}"
        if not isinstance(key, str) or not _KEY.match(key):
            raise _refuse(provider, "assets", "asset keys are 1 to 64 of A-Z a-z 0-9 _ . -")
        if not isinstance(data, bytes | bytearray):
            raise _refuse(provider, field, "an asset is the image's bytes")
        fmt, width, height = _format_and_size(bytes(data), provider=provider, field=field)
        if jev and not (
            JEV_MIN_SIDE_PX <= width <= JEV_MAX_SIDE_PX
            and JEV_MIN_SIDE_PX <= height <= JEV_MAX_SIDE_PX
        ):
            raise _refuse(
                provider, field,
                f"image is {width}x{height} px; Jev takes {JEV_MIN_SIDE_PX} to "
                f"{JEV_MAX_SIDE_PX} px a side",
            )
        wire[key] = {
            "type": "image",
            "format": fmt,
            "data_base64": base64.b64encode(bytes(data)).decode("ascii"),
        }
    keys = list(assets)
    found = _occurrences(state, questions, keys)
    referenced = {key for _, _, key in found}
    for key in keys:
        if key not in referenced:
            raise _refuse(provider, f"assets.{key}", f"no {token(key)} token references it")
    if jev:
        return ImagePlan(state=state, assets=wire)
    allowed = _top_level_positions(state, keys)
    for path, text, key in found:
        if allowed.get(path) != key or text != token(key):
            raise _refuse(
                provider, path,
                f"model {model!r} reads an image only as a whole top-level value of the state",
            )
    sent_state = _reshape(state, keys, provider) if isinstance(state, dict) else state
    return ImagePlan(state=sent_state, assets=wire)
