"""Run a menu handler or tool under its call's lease: it can never act after its job escalated.

A handler is arbitrary code in a thread, and a Python thread cannot be stopped. Its call was
claimed with a lease (the job's deadline plus a margin); a reaper or a duplicate delivery
that finds the lease over books the call ``unknown`` and escalates ``handler_interrupted``,
for a person to act. A handler still running then would act too (seen: escalated at 4.1 s,
refunded at 6.1 s). So, while the handler runs:

- **heartbeat**: the lease is renewed every ``extend_s / 3`` to the database's now plus
  ``extend_s`` (``Ledger.renew_lease``, a conditional UPDATE judged by the database's
  clock), so the reaper never takes a live handler for dead, however long it runs; the
  first renewal is made before the handler starts, and a claim already lost is not run;
- **fence**: the lease the holder knows it has ends ``extend_s`` after it *sent* its last
  confirmed renewal (the database ran it later). If the handler is still running a quarter
  of ``extend_s`` before that end with no newer renewal confirmed (the ledger unreachable,
  the loop starved), or a renewal finds the claim gone, the process exits
  (``worker.process.liveness.fatal``): the handler dies with it, before anyone can see the lease
  over. Other jobs of the process are then settled as after any crash;
- **fence in the handler's own thread**: the loop's check above cannot win every race. A
  process frozen whole past its lease (SIGSTOP, a VM paused, a swap storm) wakes its threads
  together, and the handler's ran first: found by an attack, it refunded 0.06 s after
  another worker's reaper had escalated the job. So the handler's thread runs under a
  profile hook (``sys.setprofile``, that thread only) that, on every function call, C ones
  included, ends the process from that thread once the lease the holder knows it has is
  over, before the call runs (``_Fence``).

What no holder can fence, and README "Menus" tells handler authors: a call already under way
when the process froze (a request half sent); an effect in a thread or a process the handler
started, or after it replaced the hook (``cProfile`` does); and a child process left running
when the worker dies. An effect that must never happen twice passes an idempotency key its
target checks (the job's id, through ``context``). The hook costs about a microsecond a
function call, in handler threads only: a handler doing JSON work and one HTTP request took
2 to 7% more CPU, one making 300,000 Python calls 8.5 times as long (an attack's figures).

The handler runs in a daemon thread of its own, not the loop's default executor: a stuck
handler neither starves the ledger calls (and renewals) queued there nor keeps the
interpreter from exiting. Whatever it raises is contained: an ``Exception`` is returned to the
caller as raised; ``SystemExit``, ``KeyboardInterrupt`` or any other ``BaseException`` becomes
``ExitContained`` (a handler error, never a dead loop). A cancelled caller (a soft time
limit, a shutdown) keeps renewing until the handler returns, then is cancelled: the outcome
is unknown to the ledger, the lease ends after the handler did, and only then is it escalated.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from shared.errors import ExitContained, LedgerError
from worker.ledger import CallNotFound, ClaimLost, Ledger, LedgerUnavailable
from worker.process import liveness

__all__ = ["MIN_EXTENSION_S", "run_leased"]

log = structlog.get_logger("decisions.handlers")

#: The shortest lease extension: renewals every third of it must get through a busy ledger.
MIN_EXTENSION_S = 5.0


@dataclass
class _Ended:
    value: Any = None
    error: BaseException | None = None


class _Fence:
    """The moment (``time.monotonic``) until which the holder knows its lease holds, moved
    on by the loop at each confirmed renewal and checked by the handler's thread."""

    def __init__(self, until: float, what: str) -> None:
        self.until = until
        self.what = what
        self.armed = True

    def check(self, frame: Any, event: str, arg: Any) -> None:
        # A profile hook (``sys.setprofile``): called before every call of the thread.
        if self.armed and event in ("call", "c_call") and time.monotonic() >= self.until:
            # The process ends from this very thread, which waits for the exit and runs
            # nothing more of the handler: raising here instead would unwind it through its
            # ``finally`` blocks and ``except BaseException`` clauses, which could act, with
            # the hook gone (Python unsets a profile hook that raised; found by an attack).
            self.armed = False
            liveness.fatal("handler-lease", f"{self.what} outlived its lease")

    def run(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        sys.setprofile(self.check)
        try:
            return fn(**kwargs)
        finally:
            # Disarmed first: the handler returned, and unsetting the hook is a call too.
            self.armed = False
            sys.setprofile(None)


def _start(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    name: str,
    loop: asyncio.AbstractEventLoop,
    fence: _Fence,
) -> asyncio.Future[_Ended]:
    done: asyncio.Future[_Ended] = loop.create_future()
    context = contextvars.copy_context()  # the job's log bindings, as asyncio.to_thread would

    def deliver(ended: _Ended) -> None:
        if not done.done():
            done.set_result(ended)

    def body() -> None:
        try:
            ended = _Ended(value=context.run(fence.run, fn, kwargs))
        except BaseException as exc:  # whatever the handler raised is its error
            ended = _Ended(error=exc)
        with contextlib.suppress(RuntimeError):  # a closed loop: the process is going away
            loop.call_soon_threadsafe(deliver, ended)

    threading.Thread(target=body, name=f"handler-{name}", daemon=True).start()
    return done


async def _renew(ledger: Ledger, job_id: str, step: str, extend_s: float) -> bool | None:
    """True: renewed; False: the claim is not ours any more; None: the ledger did not say."""
    try:
        return await asyncio.to_thread(
            ledger.renew_lease, job_id=job_id, step=step, extend_s=extend_s
        )
    except LedgerError as exc:
        log.error("handler.lease_renewal_failed", job_id=job_id, step=step, error=str(exc))
        return None


async def run_leased(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    ledger: Ledger,
    job_id: str,
    step: str,
    name: str,
    extend_s: float,
) -> Any:
    """``fn(**kwargs)`` in a thread under the lease of the claimed call (job_id, step).

    Returns its value or raises its ``Exception`` (any other ``BaseException`` as
    ``ExitContained``). Without running it: ``ClaimLost`` if the claim is no longer this
    delivery's, ``LedgerUnavailable`` if the ledger cannot renew it now (retry later)."""
    extend_s = max(extend_s, MIN_EXTENSION_S)
    every_s, fence_s = extend_s / 3, extend_s * 3 / 4
    sent = time.monotonic()
    renewed = await _renew(ledger, job_id, step, extend_s)
    if renewed is None:
        raise LedgerUnavailable(f"{step}: {name} not run, its claim could not be renewed")
    if not renewed:
        stored = await asyncio.to_thread(ledger.get_call, job_id, step)
        if stored is None:
            raise CallNotFound(job_id, step)
        raise ClaimLost(stored, "handler run")
    confirmed, next_try = sent, sent + every_s
    fence = _Fence(confirmed + fence_s, f"{job_id} {step}: {name}")
    done = _start(fn, kwargs, name, asyncio.get_running_loop(), fence)
    cancelled = False
    while not done.done():
        wake = min(next_try, confirmed + fence_s)
        try:
            await asyncio.wait([done], timeout=max(0.0, wake - time.monotonic()))
        except asyncio.CancelledError:
            # The handler cannot be cancelled: hold its lease until it returns (module doc).
            cancelled = True
        if done.done():
            break
        now = time.monotonic()
        if now >= next_try:
            try:
                renewed = await asyncio.wait_for(
                    _renew(ledger, job_id, step, extend_s), max(0.01, confirmed + fence_s - now)
                )
            except TimeoutError:
                renewed = None
            except asyncio.CancelledError:
                cancelled, renewed = True, None
            if renewed:
                confirmed, next_try = now, now + every_s
                fence.until = confirmed + fence_s
            elif renewed is False and not done.done():
                liveness.fatal("handler-lease", f"{job_id} {step}: {name} runs, claim taken")
            else:
                next_try = time.monotonic() + min(1.0, every_s)
        if time.monotonic() >= confirmed + fence_s and not done.done():
            liveness.fatal(
                "handler-lease", f"{job_id} {step}: {name} runs, its lease could not be renewed"
            )
    ended = done.result()
    if cancelled:
        log.warning("handler.cancel_deferred", job_id=job_id, step=step, handler=name)
        raise asyncio.CancelledError
    if ended.error is None:
        return ended.value
    if isinstance(ended.error, Exception):
        raise ended.error
    raise ExitContained(ended.error, f"handler {name}") from ended.error
