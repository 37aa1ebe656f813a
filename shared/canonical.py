"""Canonical JSON: one byte form per value, so that digests are stable.

The bytes sent to a provider are the canonical form of the request body, and its SHA-256 is
the receipt's ``request_sha256``; a recording keyed by it survives key order and whitespace.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_bytes", "digest_of", "sha256_hex"]


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """SHA-256 of the canonical form of a JSON value."""
    return sha256_hex(canonical_bytes(value))
