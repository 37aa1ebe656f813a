"""``worker.cli.startup.check_pool_options``: the Celery worker options a pool cannot honour
are refused at start, naming the option, the pool and what bounds that pool instead."""

from __future__ import annotations

from typing import Any

import pytest
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.solo import TaskPool as SoloPool
from celery.concurrency.thread import TaskPool as ThreadPool

from shared.errors import ConfigurationError
from worker.cli.startup import check_pool_options

LOOP = "worker.process.pool:LoopPool"


def _refusal(options: dict[str, Any], configured: str = LOOP) -> str:
    with pytest.raises(ConfigurationError) as refused:
        check_pool_options(options, configured)
    return str(refused.value)


def test_the_loop_pool_refuses_what_acts_on_pool_processes() -> None:
    for key, option in (
        ("autoscale", "--autoscale"),
        ("max_tasks_per_child", "--max-tasks-per-child"),
        ("max_memory_per_child", "--max-memory-per-child"),
    ):
        said = _refusal({"pool_cls": None, key: (4, 1) if key == "autoscale" else 5})
        assert said.startswith(f"{option} is not for the loop pool")
        assert "DECISIONS_MAX_IN_FLIGHT" in said and "DECISIONS_WORKER_POOL=prefork" in said


def test_a_pool_named_on_the_command_line_is_the_one_judged() -> None:
    said = _refusal({"pool_cls": ThreadPool, "autoscale": (4, 1)})
    assert said.startswith("--autoscale is not for the thread pool")
    solo = _refusal({"pool_cls": SoloPool, "max_tasks_per_child": 2})
    assert "runs one message at a time" in solo
    # Prefork honours them all, whatever the configured pool.
    prefork = {"pool_cls": PreforkPool, "autoscale": (4, 1), "max_tasks_per_child": 5}
    check_pool_options(prefork, LOOP)
    check_pool_options({"pool_cls": None, "max_memory_per_child": 9}, "prefork")


def test_no_such_option_no_refusal() -> None:
    check_pool_options({"pool_cls": None, "autoscale": None, "max_tasks_per_child": 0}, LOOP)
    check_pool_options({}, "threads")


def test_a_monkey_patching_pool_is_refused() -> None:
    fake = type("TaskPool", (), {"__module__": "celery.concurrency.gevent"})
    said = _refusal({"pool_cls": fake})
    assert said.startswith("--pool gevent is not supported") and "asyncio loop" in said
