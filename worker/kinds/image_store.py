"""Fetching a job's image refs from the allowlisted image stores, before anything is planned.

A job's image may be ``{format, ref}`` (``shared.images``): a URL inside a prefix of
``DECISIONS_IMAGE_STORES``. The worker fetches it once per delivery, just before the job's
requests are planned (``worker.delivery.lifecycle``), and plans them from the fetched bytes;
the job itself (its ledger row, its fingerprint, the reviewer's context) keeps the ref.

What keeps a ref from being a way to make the worker fetch anything:

- the allowlist is checked again here (``shared.images.ref_problem``: scheme, host, port and
  path inside one prefix; no user info, ``..``, encoded dots or slashes, query);
- no redirect is followed (a 3xx is a refusal: it could lead off the allowlist), no proxy
  from the environment is used, and the response's ``Content-Type`` must be the image's
  format (``image/png`` or ``image/jpeg``), its first bytes too;
- at most ``MAX_IMAGE_BYTES`` an image, and the job's images together at most the state
  limit (``DECISIONS_MAX_STATE_BYTES``), read as a stream that stops at the limit;
- each fetch within ``DECISIONS_IMAGE_FETCH_TIMEOUT_S`` as a whole, and all of them within
  the time the job has left: httpx's timeout bounds each read only, so a store sending a
  byte a second never tripped it and held the job (and its in-flight slot) for hours.

A ref that cannot be fetched is a ``JobInvalid`` naming ``images.<key>.ref``: the job is
rejected with nothing sent (submitting it again once the store answers is safe). At submit
time (``Client``, ``decisions submit``, the dry run) nothing is fetched: the allowlist is
checked, and the tokens' places are checked against a stand-in image (``with_stand_ins``),
so the image's own bytes are judged only here.
"""

from __future__ import annotations

import asyncio
import base64
import io
from functools import lru_cache
from typing import Final, TypeVar, cast

import httpx

from shared.errors import DecisionProviderError, FieldProblem, JobInvalid
from shared.images import IMAGE_FORMATS, PILLOW_MISSING, JobImage, ref_problem
from shared.jobs import AnyJob
from shared.limits import MAX_IMAGE_BYTES, Limits
from shared.settings import Settings

__all__ = ["CONTENT_TYPES", "has_refs", "resolve_refs", "with_stand_ins"]

J = TypeVar("J", bound=AnyJob)

#: The ``Content-Type`` a store must answer for each format.
CONTENT_TYPES: Final = {"png": "image/png", "jpeg": "image/jpeg"}
#: A stand-in's side: inside every model's accepted range (Jev takes 280 to 1568 px).
_STAND_IN_PX: Final = 512


def has_refs(job: AnyJob) -> bool:
    images: dict[str, JobImage] = getattr(job, "images", None) or {}
    return any(image.is_ref for image in images.values())


def _with_images(job: J, images: dict[str, JobImage]) -> J:
    return cast(J, job.model_copy(update={"images": images}))


@lru_cache(maxsize=2)
def _stand_in(fmt: str) -> str:
    # Only image jobs pay for Pillow (the optional [images] extra). Without it the check
    # that calls this (worker.kinds.judgments.check.image_problems) refuses the job by its field.
    try:
        from PIL import Image
    except ImportError:
        raise DecisionProviderError("invalid_request", PILLOW_MISSING, field="images") from None

    out = io.BytesIO()
    Image.new("RGB", (_STAND_IN_PX, _STAND_IN_PX), (255, 255, 255)).save(
        out, format="PNG" if fmt == "png" else "JPEG"
    )
    return base64.b64encode(out.getvalue()).decode("ascii")


def with_stand_ins(job: J) -> J:
    """``job`` with each ref replaced by a blank image of its format: for checking where
    its tokens stand (submit time), never for sending."""
    if not has_refs(job):
        return job
    images = getattr(job, "images", None) or {}
    return _with_images(
        job,
        {
            key: JobImage(format=i.format, data_base64=_stand_in(i.format)) if i.is_ref else i
            for key, i in images.items()
        },
    )


async def resolve_refs(job: J, settings: Settings, *, timeout_s: float | None = None) -> J:
    """``job`` with each image ref fetched into ``data_base64``; ``JobInvalid`` naming the
    ref that is not allowlisted or cannot be fetched within the limits.

    ``timeout_s``: the time the job has left (None: no deadline here); every fetch ends by
    then, each within ``DECISIONS_IMAGE_FETCH_TIMEOUT_S``.
    """
    if not has_refs(job):
        return job
    images: dict[str, JobImage] = dict(getattr(job, "images", None) or {})
    budget = Limits.from_settings(settings).state_bytes
    clock = asyncio.get_running_loop().time
    ends = None if timeout_s is None else clock() + timeout_s
    problems: list[FieldProblem] = []
    async with httpx.AsyncClient(
        follow_redirects=False, trust_env=False, timeout=settings.image_fetch_timeout_s
    ) as client:
        for key, image in images.items():
            if image.ref is None:
                continue
            field = f"images.{key}.ref"
            refused = ref_problem(image.ref, settings.image_stores)
            if refused:
                problems.append(FieldProblem(field, refused))
                continue
            allowed = settings.image_fetch_timeout_s
            if ends is not None:
                allowed = min(allowed, ends - clock())
            try:
                if allowed <= 0:
                    raise _Refused("the job's deadline passed before its image was fetched")
                async with asyncio.timeout(allowed):
                    data = await _fetch(
                        client, image.ref, image.format, min(budget, MAX_IMAGE_BYTES)
                    )
            except TimeoutError:
                problems.append(FieldProblem(field, _LATE))
                continue
            except _Refused as exc:
                problems.append(FieldProblem(field, str(exc)))
                continue
            budget -= len(data)
            images[key] = JobImage(
                format=image.format, data_base64=base64.b64encode(data).decode("ascii")
            )
    if problems:
        raise JobInvalid(problems, job.id)
    return _with_images(job, images)


#: A fetch that did not end in time (a read timeout or the whole fetch's).
_LATE: Final = "the store did not answer in time; submit the job again later"


class _Refused(Exception):
    """Why a ref was not taken (a sentence for the rejection)."""


async def _fetch(client: httpx.AsyncClient, url: str, fmt: str, limit: int) -> bytes:
    try:
        # Uncompressed (``identity``): the limit then bounds what the store sends, too.
        async with client.stream("GET", url, headers={"accept-encoding": "identity"}) as response:
            if response.is_redirect:
                raise _Refused(
                    f"the store answered {response.status_code} (a redirect is never followed)"
                )
            if response.status_code != 200:
                raise _Refused(f"the store answered {response.status_code}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != CONTENT_TYPES[fmt]:
                sent = kind or "no content type"
                raise _Refused(f"the store sent {sent!r}, not {CONTENT_TYPES[fmt]}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _Refused(_too_big(limit))
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise _Refused(_too_big(limit))
    except httpx.TimeoutException:
        raise _Refused(_LATE) from None
    except httpx.HTTPError as exc:
        raise _Refused(
            f"the store could not be read ({type(exc).__name__}); submit the job again later"
        ) from None
    if not bytes(body).startswith(IMAGE_FORMATS[fmt]):
        raise _Refused(f"the store's bytes are not a {fmt} image")
    return bytes(body)


def _too_big(limit: int) -> str:
    return f"the image is over {limit:,} bytes (an image's limit, or what the job has left)"
