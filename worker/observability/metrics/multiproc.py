"""prometheus-client's multiprocess mode for Celery's prefork pool.

Pool processes write their samples to files in one directory; the main process serves them
all, summed, on one port: one scrape target per worker, as Prometheus users expect of a
prefork server (gunicorn works the same way). The directory is the operator's
``PROMETHEUS_MULTIPROC_DIR`` when set (emptied at start: stale files would add an old run's
counts), else a fresh temporary one removed at shutdown. One directory per worker.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["ENV", "forget_dead_processes", "prepare_directory", "remove_directory"]

ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_FILE = re.compile(r"^gauge_live\w*?_(\d+)\.db$")
_created: Path | None = None


def prepare_directory() -> Path:
    """Point this process (and the pool it forks) at an empty multiprocess directory."""
    global _created
    given = os.environ.get(ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="decisions-metrics-"))
        _created = path
        os.environ[ENV] = str(path)
    if "prometheus_client.values" in sys.modules:
        # Storage is chosen at import from the variable; something imported it before us.
        from prometheus_client import values

        values.ValueClass = values.get_value_class()
    return path


def forget_dead_processes(directory: Path) -> None:
    """Drop the live gauges of pool processes that died (a SIGKILL runs no exit hook)."""
    from prometheus_client import multiprocess

    for item in directory.glob("gauge_live*.db"):
        match = _LIVE_FILE.match(item.name)
        if match and not _alive(int(match.group(1))):
            multiprocess.mark_process_dead(int(match.group(1)), str(directory))


def remove_directory() -> None:
    if _created is not None:
        shutil.rmtree(_created, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
