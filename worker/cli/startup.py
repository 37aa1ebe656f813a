"""What ``decisions worker`` (before Celery starts) and ``decisions run`` (before its batch)
check of the providers and runtimes the settings describe.

- The registries build: an unknown default, or a host under a built-in name, would fail
  every task of the worker.
- Every per-provider setting (``PER_PROVIDER``) is keyed by a name the registries know. The
  settings are read as plain dicts, and the code asks them by provider name
  (``settings.daily_ceiling_usd.get(provider)``): a misspelt key (``{"Faux": 0}``) matched
  nothing, so its ceiling, limit or price did not apply and nobody was told.
- A SQLite ledger's file can be written (``check_ledger_file``): a worker on a read-only or
  full one took every message and retried each for ever, logging only Celery's INFO line.
- Celery's worker options suit the pool (``check_pool_options``): ``--autoscale`` on the
  loop pool set its reserve to the autoscaler's minimum, then ended the worker at the first
  scale-up (Celery's autoscaler thread exits the process when the pool cannot grow), and
  ``--max-tasks-per-child`` did nothing on any pool but prefork.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from shared.errors import ConfigurationError
from shared.settings import Settings
from worker.cli.explanation import setting_variable
from worker.cli.ledger_file import unwritable

__all__ = [
    "PER_PROVIDER",
    "UNSUPPORTED_POOLS",
    "check_ledger_file",
    "check_pool_options",
    "check_registries",
    "pool_refusal",
    "unknown_keys",
]

#: The settings keyed by provider name, and whether a chat runtime's name may key them too:
#: a menu job's budget is counted under its runtime (``worker.kinds.menus.model_calls``) and
#: one limiter paces providers and runtimes alike, but a maximum price is read for a
#: provider's requests only (``ProviderRegistry.worst_cost``).
PER_PROVIDER: Mapping[str, bool] = {
    "max_price_per_mtok_usd": False,
    "daily_ceiling_usd": True,
    "provider_limits": True,
}


def check_registries(settings: Settings) -> None:
    """``ConfigurationError`` for a provider or runtime setting that would fail every task of
    the worker, or that names no provider: it refuses to start."""
    from worker.providers import ProviderRegistry
    from worker.runtimes import RuntimeRegistry

    async def known() -> tuple[list[str], list[str]]:
        providers = ProviderRegistry.from_settings(settings)
        try:
            runtimes = RuntimeRegistry.from_settings(settings)
            await runtimes.aclose()
        finally:
            await providers.aclose()
        # An absent name (the faux, outside tests) is still a name: a key for it is harmless.
        return [*providers.names(), *providers.absent], [*runtimes.names(), *runtimes.absent]

    providers, runtimes = asyncio.run(known())
    problems = unknown_keys(settings, providers, runtimes)
    if problems:
        raise ConfigurationError("; ".join(problems))


#: Celery worker options (as its command passes them on) that only act on prefork processes:
#: other pools ignored them in silence, or (``--autoscale``) ended the worker at the first
#: scale-up, when Celery's autoscaler thread found a pool that cannot grow.
_PROCESS_OPTIONS: Mapping[str, tuple[str, str]] = {
    "autoscale": ("--autoscale", "grows and shrinks pool processes"),
    "max_tasks_per_child": ("--max-tasks-per-child", "replaces pool processes"),
    "max_memory_per_child": ("--max-memory-per-child", "replaces pool processes"),
}
_PREFORK = "celery.concurrency.prefork"
_PATCHING = "its monkey-patching breaks the worker's asyncio loop"
#: Celery pools the worker refuses (``DECISIONS_WORKER_POOL`` cannot name them; ``--pool``
#: could), and why.
UNSUPPORTED_POOLS: Mapping[str, str] = {
    "gevent": _PATCHING,
    "eventlet": _PATCHING,
    "custom": "it names a class of CELERY_CUSTOM_WORKER_POOL, outside what the worker runs on",
}


def pool_refusal(name: str) -> str | None:
    """Why ``--pool name`` is refused and what to use instead (None: it is not)."""
    why = UNSUPPORTED_POOLS.get(name)
    if why is None:
        return None
    return (
        f"--pool {name} is not supported: {why}; leave --pool out for the loop pool "
        "(DECISIONS_MAX_IN_FLIGHT requests in flight a process), or set "
        "DECISIONS_WORKER_POOL to prefork, threads or solo"
    )


def check_pool_options(options: Mapping[str, Any], configured_pool: str) -> None:
    """``ConfigurationError`` for Celery worker ``options`` (``celeryd_init``'s) that the
    pool they choose (``pool_cls``, else ``configured_pool``) cannot honour."""
    from celery.concurrency import get_implementation

    from worker.process.pool import LoopPool  # the pool, only when a worker starts

    pool = options.get("pool_cls") or get_implementation(configured_pool)
    module = getattr(pool, "__module__", "")
    refused = pool_refusal(module.rpartition("celery.concurrency.")[2])
    if refused is not None:  # `celery -A worker.app worker -P gevent`, with gevent installed
        raise ConfigurationError(refused)
    if module == _PREFORK:
        return
    loop = isinstance(pool, type) and issubclass(pool, LoopPool)
    name = "loop" if loop else module.rsplit(".", 1)[-1]
    bound = {
        "loop": "DECISIONS_MAX_IN_FLIGHT bounds its requests in flight",
        "solo": "it runs one message at a time",
    }.get(name, "DECISIONS_WORKER_CONCURRENCY sets its size")
    for key, (option, what) in _PROCESS_OPTIONS.items():
        if options.get(key):
            raise ConfigurationError(
                f"{option} is not for the {name} pool: it {what}, which only the prefork "
                f"pool has; {bound} (for pool processes, set DECISIONS_WORKER_POOL=prefork)"
            )


def check_ledger_file(settings: Settings) -> None:
    """``ConfigurationError`` when the SQLite file the ledger URL names cannot be written."""
    problem = unwritable(settings.ledger_url)
    if problem is not None:
        raise ConfigurationError("; ".join(problem.lines()))


def unknown_keys(
    settings: Settings, providers: Sequence[str], runtimes: Sequence[str]
) -> list[str]:
    """One line for each key of a per-provider setting that names no provider (nor runtime,
    where a runtime's name is a key too), with the names there are and the closest one."""
    problems = []
    for field, runtimes_too in PER_PROVIDER.items():
        names = list(dict.fromkeys([*providers, *runtimes] if runtimes_too else providers))
        kind = "provider or runtime" if runtimes_too else "provider"
        kinds = "providers and runtimes" if runtimes_too else "providers"
        for key in getattr(settings, field):
            if key in names:
                continue
            guess = _closest(key, names)
            hint = f" (did you mean {guess!r}?)" if guess else ""
            problems.append(
                f"{setting_variable(field)}: {key!r} names no {kind}{hint}; "
                f"the {kinds} are {', '.join(names)}"
            )
    return problems


def _closest(key: str, names: Sequence[str]) -> str | None:
    # Case first: "Faux" is "faux", however short the name.
    lowered = {name.lower(): name for name in names}
    found = difflib.get_close_matches(key.lower(), list(lowered), n=1)
    return lowered[found[0]] if found else None
