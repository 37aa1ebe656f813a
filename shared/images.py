"""Images a job carries (experimental): ``images: {key: {format, data_base64}}``, or
``{key: {format, ref}}``: a reference the worker fetches from an allowlisted image store.

An image is referenced from the state or a question by the token ``<key>`` (the System One
seed's ``"<i1>"``); where a token may stand depends on the model and is checked by the
worker's provider before the paid request (``worker.providers.images``: Jev reads a token
anywhere; every other model only as a whole top-level value of the state). Here only what the
job itself can be checked for: the key, the format, base64 that decodes to an image of that
format, and the sizes in ``shared.limits``. The bytes never leave the job except to the
provider: base64 travels on the queue because the queue carries JSON only.

A ``ref`` is an ``http(s)`` URL inside one of the prefixes of the setting
``DECISIONS_IMAGE_STORES`` (``ref_problem``: the same check in the ``Client`` and in the
worker, which fetches it just before planning the job's requests, without following a
redirect, within the size and format limits here: ``worker.kinds.image_store``). It never names an
arbitrary URL: the host, the port and the path must all fall inside an allowlisted prefix,
after refusing whatever could make two readings of one URL disagree (user info, ``..``
segments, percent-encoded dots, slashes, backslashes or percent signs, a ``;``, a query, a
fragment).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from shared.errors import FieldProblem
from shared.limits import MAX_IMAGE_BYTES

__all__ = [
    "IMAGE_FORMATS",
    "MAX_REF_CHARS",
    "PILLOW_MISSING",
    "ImageKey",
    "JobImage",
    "ref_problem",
    "ref_problems",
    "store_prefix",
]

#: PNG and JPEG, told by their first bytes (what the System One hosts take).
IMAGE_FORMATS: Final[dict[str, bytes]] = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}
#: An image's key, referenced as ``<key>``: 1 to 64 of ``A-Z a-z 0-9 _ . -``.
ImageKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]


#: The longest ``ref`` (a URL).
MAX_REF_CHARS: Final = 2000
#: What a worker without the optional ``[images]`` extra says of an image it must read.
PILLOW_MISSING: Final = (
    "this worker cannot read images: Pillow is not installed; "
    "pip install 'decision-worker[images]'"
)


class JobImage(BaseModel):
    """One image: its format, and its bytes in base64 or a ``ref`` into an image store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["png", "jpeg"]
    data_base64: str | None = Field(None, min_length=1, description="the image, base64")
    ref: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_REF_CHARS,
        description="or an http(s) URL inside a prefix of DECISIONS_IMAGE_STORES",
    )

    @field_validator("ref")
    @classmethod
    def _a_url(cls, value: str | None) -> str | None:
        if value is not None:
            problem = _url_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    @property
    def is_ref(self) -> bool:
        return self.ref is not None

    def shown(self) -> dict[str, str]:
        """The image as a job gave it (``format`` and ``data_base64`` or ``ref``)."""
        return self.model_dump(exclude_none=True)

    @field_validator("data_base64")
    @classmethod
    def _decodes(cls, value: str | None) -> str | None:
        if value is None:
            return value
        # At most 4/3 of the byte limit (plus padding) is read before decoding anything.
        if len(value) > (MAX_IMAGE_BYTES + 2) // 3 * 4:
            raise ValueError(f"an image is at most {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("data_base64 is not base64") from None
        return value

    @model_validator(mode="after")
    def _is_its_format(self) -> JobImage:
        if (self.data_base64 is None) == (self.ref is None):
            raise ValueError("an image has data_base64 or a ref (exactly one)")
        if self.ref is not None:
            return self  # its bytes are checked when the worker fetches them
        data = self.data()
        if len(data) > MAX_IMAGE_BYTES:
            raise ValueError(f"an image is at most {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
        if not data.startswith(IMAGE_FORMATS[self.format]):
            raise ValueError(f"data_base64 is not a {self.format} image")
        return self

    def data(self) -> bytes:
        """The image's bytes (a ``ref`` has none until the worker fetched it: ValueError)."""
        if self.data_base64 is None:
            raise ValueError(f"image {self.ref!r} was not fetched")
        return base64.b64decode(self.data_base64)


# Whatever could make the URL the check reads differ from the one a server serves: encoded
# . / \ NUL, and an encoded % (``%252e%252e`` is ``..`` to a server that decodes twice); a
# ``;`` (``..;/`` is ``../`` to a server that cuts path parameters, as Tomcat does).
_AMBIGUOUS = re.compile(r"%(2e|2f|5c|00|25)|[\\;]|[\x00-\x20\x7f]", re.IGNORECASE)


#: A ``%`` that does not begin an escape: servers differ on what it means.
_BARE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _url_problem(url: str) -> str | None:
    if _AMBIGUOUS.search(url):
        return (
            "a ref has no spaces, control characters, backslashes, semicolons or encoded "
            ". / \\ %"
        )
    if not url.isascii():
        # A store that normalises Unicode reads "‥" or fullwidth dots as "..", and a host
        # in Unicode has two spellings: one form only, the one on the wire.
        return "a ref is ASCII: a host in its xn-- form, other characters %-encoded"
    if _BARE_PERCENT.search(url):
        return "a ref's % begins two hex digits"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "a ref is an http or https URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "a ref is an http or https URL"
    if "@" in parts.netloc:
        return "a ref has no user name or password"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "a ref has no query or fragment"
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        return "a ref has no . or .. path segments"
    if "//" in parts.path:
        return "a ref has no empty path segments (//)"  # some servers merge them, some not
    del port
    return None


def _origin_and_path(url: str) -> tuple[str, int, str, str]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    host = (parts.hostname or "").lower()
    return parts.scheme.lower(), parts.port or default, host, parts.path or "/"


def store_prefix(text: str) -> str:
    """An allowlisted store's prefix as the setting holds it: checked, ending with ``/``
    (so ``https://s/imgs`` never admits ``https://s/imgs-other/``); ValueError otherwise."""
    text = text.strip()
    problem = _url_problem(text)
    if problem:
        raise ValueError(f"image store {text[:80]!r}: {problem.replace('a ref', 'a store')}")
    return text if text.endswith("/") else text + "/"


def ref_problem(ref: str, stores: Sequence[str]) -> str | None:
    """Why the worker may not fetch ``ref`` (None: it may): inside no allowlisted prefix."""
    problem = _url_problem(ref)
    if problem:
        return problem
    if not stores:
        return "no image store is allowlisted (DECISIONS_IMAGE_STORES); send data_base64"
    scheme, port, host, path = _origin_and_path(ref)
    for store in stores:
        s_scheme, s_port, s_host, s_path = _origin_and_path(store)
        if (scheme, port, host) == (s_scheme, s_port, s_host) and path.startswith(s_path):
            return None
    return "not inside an allowlisted image store (DECISIONS_IMAGE_STORES)"


def ref_problems(
    images: Mapping[str, JobImage] | None, stores: Sequence[str]
) -> list[FieldProblem]:
    """A job's image refs that point outside the allowlisted stores, each named."""
    problems = []
    for key, image in (images or {}).items():
        if image.ref is not None:
            problem = ref_problem(image.ref, stores)
            if problem:
                problems.append(FieldProblem(f"images.{key}.ref", problem))
    return problems
