"""A response body read under a cap: what a provider sends back cannot exhaust the worker.

httpx reads a whole body into memory (``client.send`` without ``stream``), decompressing it
as it goes, whatever its size. A provider, or a proxy in front of one, that answers a paid
request with gigabytes, or with a few hundred kilobytes of gzip that inflate to gigabytes,
would take the worker's memory with it, and every job in flight on that process.
``read_body`` reads the raw stream that ``send(..., stream=True)`` returned and stops at
``limit`` bytes *after* decompression, the size that lands in memory. It inflates with
``zlib`` itself, asking each step for no more than the room left (``max_length``): httpx's
own decoders inflate a whole network read at once, about 64 KiB of gzip that can become
64 MiB before anything could count it. It decodes what httpx does (``gzip`` and
``deflate``, the encodings httpx asks for; an unknown one is passed through as httpx passes
it), with httpx's ``deflate`` leniency (zlib-wrapped or raw).

Refused, the body is not read further and the connection is closed, not reused: the rest of
that response would otherwise be read as the next one's start. ``ResponseTooLarge`` is an
``httpx.DecodingError`` (the response arrived and could not be turned into a usable body),
so callers that classify httpx's errors see it on the "answered, unusable" side, never on
the "never sent" side: the request was processed and is not sent again.
"""

from __future__ import annotations

import zlib

import httpx

__all__ = ["ResponseTooLarge", "read_body", "read_prefix"]


class ResponseTooLarge(httpx.DecodingError):
    """A response body over the limit (its text names the limit, never the body)."""


class _Inflate:
    """One content coding undone a piece at a time, never past ``limit`` bytes out."""

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.limit = limit
        self.size = 0
        self._first = True
        wbits = zlib.MAX_WBITS | 16 if coding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._inflater = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> bytes:
        room = self.limit - self.size + 1  # one byte past the limit proves it is over
        first, self._first = self._first, False
        try:
            out = self._inflater.decompress(data, room)
        except zlib.error:
            if not (first and self.coding == "deflate"):
                raise httpx.DecodingError(f"the {self.coding} body is corrupt") from None
            # httpx's leniency: "deflate" sent raw, without zlib's wrapper (tried once).
            self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.feed(data)
        self.size += len(out)
        return out

    def end(self) -> bytes:
        out = self._inflater.flush()
        self.size += len(out)
        return out


def _codings(response: httpx.Response) -> list[str]:
    """The response's content codings to undo, last applied first (as httpx undoes them)."""
    values = response.headers.get_list("content-encoding", split_commas=True)
    known = [v.strip().lower() for v in values]
    return [c for c in reversed(known) if c in ("gzip", "x-gzip", "deflate")]


async def read_body(response: httpx.Response, limit: int) -> bytes:
    """The decoded body of a streamed ``response``, at most ``limit`` bytes; the response is
    closed either way. Raises ``ResponseTooLarge`` past the limit, ``httpx.DecodingError``
    for a body its content coding cannot undo."""
    body, whole = await _read(response, limit, prefix=False)
    if not whole:
        raise ResponseTooLarge(_too_large(limit), request=response.request)
    return body


async def read_prefix(response: httpx.Response, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the decoded body; the rest is not read (the
    connection is closed). For a body only looked into, as an error's is for its kind."""
    return (await _read(response, limit, prefix=True))[0]


async def _read(response: httpx.Response, limit: int, *, prefix: bool) -> tuple[bytes, bool]:
    """The body up to ``limit`` bytes, and whether that is all of it; closed either way. Not
    ``prefix``: nothing is read of a body whose declared length is over the limit."""
    try:
        if response.is_stream_consumed:
            # A transport that built its response from bytes (an in-process fake, a mock):
            # httpx decoded them already, and they are in memory whatever is decided here.
            return response.content[:limit], len(response.content) <= limit
        stages = [_Inflate(coding, limit) for coding in _codings(response)]
        declared = response.headers.get("content-length", "")
        # Only an uncompressed body's length is its size in memory; a compressed one is
        # counted as it inflates.
        if not prefix and not stages and declared.isdigit() and int(declared) > limit:
            return b"", False
        parts: list[bytes] = []
        room = limit
        try:
            async for raw in response.aiter_raw():
                room = _add(parts, _through(stages, raw), room)
            _add(parts, _ended(stages), room)
        except _Full:
            return b"".join(parts), False
        return b"".join(parts), True
    finally:
        await response.aclose()


class _Full(Exception):
    """The limit is reached with more to come."""


def _through(stages: list[_Inflate], data: bytes) -> bytes:
    """``data`` through every stage. The last one's output, one byte past the limit at most,
    is counted by ``_add``; an earlier one past it means the body is over."""
    for i, stage in enumerate(stages):
        data = stage.feed(data)
        if stage.size > stage.limit and i < len(stages) - 1:
            raise _Full
    return data


def _ended(stages: list[_Inflate]) -> bytes:
    """What the stages still hold once the raw stream ended, through the later stages."""
    tail = b""
    for i, stage in enumerate(stages):
        tail = stage.feed(tail) + stage.end()
        if stage.size > stage.limit and i < len(stages) - 1:
            raise _Full
    return tail


def _add(parts: list[bytes], data: bytes, room: int) -> int:
    """Keep ``data`` in ``parts`` as far as ``room`` goes; the room left (``_Full`` past it)."""
    if len(data) > room:
        parts.append(data[:room])
        raise _Full
    if data:
        parts.append(data)
    return room - len(data)


def _too_large(limit: int) -> str:
    return f"the response body is over {limit:,} bytes (DECISIONS_MAX_RESPONSE_BYTES)"
