"""One rule for counting a request's tokens before a provider does.

About 4 bytes of the exact body sent (canonical JSON) a token: the common estimate, close to
what System One hosts and OpenAI count for JSON, and what the faux bills, so that its cost
matches the estimate exactly. Packing (request limits), the batch estimate, the providers'
cost estimates and the faux all count with this, so they cannot drift apart.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BYTES_PER_TOKEN", "estimate_tokens"]

BYTES_PER_TOKEN: Final = 4


def estimate_tokens(size_bytes: int) -> int:
    """The tokens of a body of ``size_bytes`` (at least one: a request always costs one)."""
    return max(1, size_bytes // BYTES_PER_TOKEN)
