"""Run Python code as if some packages were not installed: a meta-path finder that refuses them.

    python -m tests.support.blocked decisions run jobs.jsonl      # the CLI
    python -m tests.support.blocked script.py ARGS...             # a script

``BLOCKED_MODULES`` (comma-separated) names the modules refused, each with its submodules
(``worker.testing.faux`` refuses ``worker.testing.faux.app`` too); an import of one raises
``ModuleNotFoundError`` exactly as a missing package does. Every refused import is appended
to ``BLOCKED_LOG`` (a file, when set) as it happens, from every process of the tree (a
worker's forked pool included), so a test can tell "never tried" from "tried and coped".
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["Blocker", "install", "main"]


class Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, names: Sequence[str], log: str | None = None) -> None:
        self.names = tuple(n for n in names if n)
        self.log = log

    def blocks(self, fullname: str) -> bool:
        return any(fullname == n or fullname.startswith(n + ".") for n in self.names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if not self.blocks(fullname):
            return None
        if self.log:
            with open(self.log, "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()} {fullname}\n")
        raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def install(names: Sequence[str], log: str | None = None) -> Blocker:
    for name in list(sys.modules):
        if any(name == n or name.startswith(n + ".") for n in names):
            raise RuntimeError(f"{name} is imported already; block it before anything imports it")
    blocker = Blocker(names, log)
    sys.meta_path.insert(0, blocker)
    return blocker


def main() -> None:
    install(os.environ.get("BLOCKED_MODULES", "").split(","), os.environ.get("BLOCKED_LOG"))
    target, *rest = sys.argv[1:]
    if target == "decisions":
        sys.argv = ["decisions", *rest]
        from worker.cli import main as decisions

        decisions()
        return
    sys.argv = [target, *rest]
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
