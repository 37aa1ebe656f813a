"""A host's public model catalog (``GET {base}/v1/models?output_modalities=decisions``),
read once and shared by every request of the process.

Why it is shaped like this: the image check of one request must not be cut short by that
request's deadline or cancel, or a catalog that takes 3 s to read would never be read by
requests with 2 s left. So the read runs as its own task under its own 10 s timeout; a
request waits for it through ``asyncio.shield``, within its own deadline only, and the read
goes on for the requests after it. A read that fails is forgotten, so the next request tries
again; one that succeeds serves every request for ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Final

import httpx

from shared.errors import DecisionProviderError
from worker.http.body import read_body

__all__ = ["CATALOG_PATH", "CATALOG_TIMEOUT_S", "ModelCatalog"]

CATALOG_PATH: Final = "/v1/models?output_modalities=decisions"
CATALOG_TIMEOUT_S: Final = 10.0

logger = logging.getLogger(__name__)


class _ReadFailed(Exception):
    """The catalog could not be read (kept to the exception's class name)."""


class ModelCatalog:
    """Which models of one host take image input, per its public catalog."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        provider: str,
        timeout_s: float = CATALOG_TIMEOUT_S,
        ttl_s: float = 3600.0,
        max_bytes: int = 16 * 2**20,
    ) -> None:
        self._http = http
        #: The longest catalog read (``DECISIONS_MAX_RESPONSE_BYTES``, as for a decision).
        self.max_bytes = max_bytes
        self.url = url
        self.provider = provider
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self._task: asyncio.Task[dict[str, frozenset[str]]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._entries: dict[str, frozenset[str]] | None = None
        self._read_at = 0.0
        #: Reads started (for tests and metrics).
        self.reads = 0

    async def input_modalities(self, model: str, *, wait_s: float) -> frozenset[str] | None:
        """The model's input modalities (``None``: not listed), waiting at most ``wait_s``.

        Raises ``timeout`` when ``wait_s`` runs out first, ``connection`` when the read
        failed, ``aborted`` when the caller is cancelled; the read itself goes on.
        """
        entries = await self._entries_within(wait_s)
        return entries.get(model)

    async def _entries_within(self, wait_s: float) -> dict[str, frozenset[str]]:
        if self._entries is not None and time.monotonic() - self._read_at < self.ttl_s:
            return self._entries
        task = self._current_task()
        try:
            async with asyncio.timeout(max(wait_s, 0.0)):
                return await asyncio.shield(task)
        except asyncio.CancelledError as cancel:
            raise DecisionProviderError(
                "aborted", "cancelled while reading the model catalog; nothing was sent",
                provider=self.provider,
            ) from cancel
        except TimeoutError:
            raise DecisionProviderError(
                "timeout", "the deadline passed while reading the model catalog; nothing was sent",
                provider=self.provider,
            ) from None
        except _ReadFailed as exc:
            raise DecisionProviderError(
                "connection", f"the model catalog could not be read ({exc}); nothing was sent",
                provider=self.provider,
            ) from None

    def _current_task(self) -> asyncio.Task[dict[str, frozenset[str]]]:
        loop = asyncio.get_running_loop()
        task = self._task
        # A done task here is a failed read or a stale one (a fresh success returned above).
        if task is None or self._loop is not loop or task.done():
            self.reads += 1
            task = loop.create_task(self._read(), name=f"catalog:{self.provider}")
            task.add_done_callback(self._settled)
            self._task, self._loop = task, loop
        return task

    def _settled(self, task: asyncio.Task[dict[str, frozenset[str]]]) -> None:
        # Retrieve the exception so an unawaited failure is not reported as "never
        # retrieved", and forget it so the next request reads again.
        if task.cancelled() or task.exception() is not None:
            if self._task is task:
                self._task = None
            return
        self._entries = task.result()
        self._read_at = time.monotonic()

    async def _read(self) -> dict[str, frozenset[str]]:
        try:
            async with asyncio.timeout(self.timeout_s):
                request = self._http.build_request(
                    "GET", self.url, timeout=httpx.Timeout(self.timeout_s)
                )
                response = await self._http.send(request, stream=True)
                body = await read_body(response, self.max_bytes)
        except TimeoutError:
            raise _ReadFailed("timed out") from None
        except httpx.HTTPError as exc:
            logger.info("provider %s: catalog read failed (%s)", self.provider, type(exc).__name__)
            raise _ReadFailed(type(exc).__name__) from None
        if response.status_code != 200:
            raise _ReadFailed(f"status {response.status_code}")
        try:
            return _parse(json.loads(body))
        # RecursionError: a body nested deeper than the parser goes (found by an attack: it
        # left the provider as a bug, and the request, never sent, was booked unknown).
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            raise _ReadFailed("not a catalog") from None


def _parse(body: Any) -> dict[str, frozenset[str]]:
    entries: dict[str, frozenset[str]] = {}
    for entry in body["data"]:
        modalities = frozenset(
            str(m) for m in (entry.get("architecture") or {}).get("input_modalities") or ()
        )
        for name in (entry.get("id"), entry.get("canonical_slug")):
            if isinstance(name, str):
                entries[name] = modalities
    return entries
