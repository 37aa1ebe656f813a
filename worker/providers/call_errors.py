"""The ``DecisionProviderError`` a failed send raises, built from what is safe to keep.

Apart from the send loop (``worker.providers.transport``) because what may leave a request's
failure is its own rule: exception class names, the status code, the phase and the attempt
count, and at most two short fields a provider's error body offered (a ``ref_id`` to quote to
its support, an error ``kind``). Those two come from the other side of the wire, so each is
dropped when it holds the request's key in any form (``shared.scrub``) or is not a plain
short token, before it reaches the error's message and attributes.
"""

from __future__ import annotations

import re

from shared.errors import DecisionProviderError, ProviderErrorCode
from shared.scrub import remove_secrets
from worker.providers.outbound import ErrorDetails, UnknownCost

__all__ = ["provider_error"]

_SAFE_REF = re.compile(r"^[A-Za-z0-9._:/\-]{1,128}$")
_SAFE_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")


def _kept(text: str | None, key: str | None, safe: re.Pattern[str]) -> str | None:
    if not text:
        return None
    if key and remove_secrets(text, [key]) != text:
        return None  # the key in any form (case-folded, base64, ...): drop the whole field
    return text if safe.match(text) else None


def provider_error(
    code: ProviderErrorCode,
    message: str,
    *,
    provider: str,
    attempts: int,
    key: str | None,
    unknown_cost: UnknownCost,
    status_code: int | None = None,
    details: ErrorDetails | None = None,
    retry_after_s: float | None = None,
    with_cost: bool = False,
) -> DecisionProviderError:
    """The error of a send that ended in ``code``; ``with_cost``: it may have been processed,
    so it carries ``unknown_cost`` (what an ``outcome_unknown`` is booked at)."""
    ref_id = kind = None
    if details is not None:
        ref_id = _kept(details.ref_id, key, _SAFE_REF)
        kind = _kept(details.kind, key, _SAFE_KIND)
    if kind:
        message = f"{message} ({kind})"
    if ref_id:
        message = f"{message}; ref_id {ref_id}"
    return DecisionProviderError(
        code,
        message,
        provider=provider,
        status_code=status_code,
        ref_id=ref_id,
        cost_usd=unknown_cost.usd if with_cost else None,
        cost_basis=unknown_cost.basis if with_cost else None,
        retry_after_s=retry_after_s,
        attempts=attempts,
    )
