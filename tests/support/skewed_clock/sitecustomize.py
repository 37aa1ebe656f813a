"""Put this directory first on a worker's PYTHONPATH with ``HISTORY_CLOCK_SKEW_S`` set, and
every ``worker``/``shared`` module of that process reads a wall clock that many seconds off
(``datetime.now``), as on a machine whose clock is wrong; as ``tests/unit/test_one_clock.py``
skews it in process. The modules are patched as they are imported (a finder wrapping the
loaders), since a worker process imports them long after this file runs."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from datetime import datetime as REAL_DATETIME
from datetime import timedelta
from typing import Any

__all__: list[str] = []

_SKEW = float(os.environ.get("HISTORY_CLOCK_SKEW_S") or 0)


class _Same(type):
    # A real datetime (read from the database, say) is still a datetime here.
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, REAL_DATETIME)


class _Skewed(REAL_DATETIME, metaclass=_Same):
    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return REAL_DATETIME.now(tz) + timedelta(seconds=_SKEW)


def _patch(module: Any) -> None:
    if getattr(module, "datetime", None) is REAL_DATETIME:
        module.datetime = _Skewed


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] not in ("worker", "shared"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


#: Written to stderr (the worker's log) when armed, so a test can tell the skew is on.
BANNER = "skewed_clock: worker and shared datetime.now() runs {:+g} s off"

if _SKEW:
    sys.meta_path.insert(0, _Finder())
    print(BANNER.format(_SKEW), file=sys.stderr, flush=True)
