"""Handlers that misbehave on purpose, for the liveness and lease tests (``t_live_*`` names).

Each run is appended to ``MENUS_TEST_RUNS`` (when set) as in ``tests.menus_worker.handlers``,
with the moment it *acted* (``at``, epoch seconds), so a test can compare it with the moment
an escalation was published.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from worker.kinds.menus.handlers import handler

__all__: list[str] = []


def _ran(name: str, **args: Any) -> None:
    path = os.environ.get("MENUS_TEST_RUNS")
    if path:
        line = json.dumps({"handler": name, "args": args, "at": time.time()}) + "\n"
        with open(path, "a", encoding="utf-8") as out:
            out.write(line)


@handler("t_live_slow")
def slow(order_id: str, seconds: float) -> dict[str, Any]:
    """Refund an order, slowly (the payments system takes its time)."""
    time.sleep(seconds)
    _ran("t_live_slow", order_id=order_id)  # the refund happens here, after the wait
    return {"refunded": order_id, "after_s": seconds}


@handler("t_live_stubborn")
def stubborn(order_id: str, seconds: float) -> dict[str, Any]:
    """Refund an order slowly, and refund it anyway whatever stops the wait."""
    try:
        time.sleep(seconds)
        _ran("t_live_stubborn", order_id=order_id, when="after the wait")
    except BaseException:
        _ran("t_live_stubborn", order_id=order_id, when="stopped")
        raise
    return {"refunded": order_id}


@handler("t_live_exit")
def exits(code: int) -> None:
    """Leave the way a badly written script does."""
    _ran("t_live_exit", code=code)
    raise SystemExit(code)


@handler("t_live_interrupt")
def interrupts(reason: str) -> None:
    """Stop as a stray Ctrl-C would."""
    _ran("t_live_interrupt", reason=reason)
    raise KeyboardInterrupt(reason)


def _stop_the_loop() -> None:
    raise SystemExit("the loop is stopped from a callback, as a bug in a library could")


@handler("t_live_kill_loop")
def kill_loop(reason: str) -> None:
    """Kill the worker's loop itself (what no job should be able to do; the test's 'anyway')."""
    from worker.process.loop import process_loop

    _ran("t_live_kill_loop", reason=reason)
    process_loop().loop.call_soon_threadsafe(_stop_the_loop)
    time.sleep(30)
