"""``python -m bench.http_stacks_fork``: the worker's own HTTP client on ``httpx2``.

``httpx2`` (Pydantic's maintained fork of httpx, with ``httpcore2``) keeps httpx's and
httpcore's interfaces, so the worker's client (``worker.http.connection_pool``, built on
httpcore's connections) runs on it unchanged once ``httpx2.alias_httpx()`` has made
``import httpx`` and ``import httpcore`` resolve to the fork. That alias is process-wide and
must come before any import of httpx, hence a process of its own, started by
``python -m bench.http_stacks`` against its faux; the fork is not a dependency (install
``httpx2`` to measure it).
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_stacks_fork")
    parser.add_argument("--faux", required=True, help="the faux's URL")
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stacks", default="worker.http")
    args = parser.parse_args(argv)
    try:
        importlib.import_module("httpx2").alias_httpx()
    except ImportError:
        print(f"{'httpx2 (the fork), worker.http':40} not installed (httpx2)", flush=True)
        return 0
    # Imported only now: everything below sees httpx2 as httpx.
    stacks = importlib.import_module("bench.http_stacks")
    found = stacks.measure(args.faux, args.n, args.n // 10, args.concurrency, args.stacks)
    for name, figures in found.items():
        print(f"{name.replace('httpx ', 'httpx2 ', 1):40} {figures}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
