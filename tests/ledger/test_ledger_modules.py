"""The ledger's modules keep to the house rule of at most about 400 lines: past it, a concept
gets a module of its own (``store`` holds ``Ledger``'s plumbing, jobs, schema and labels;
its calls are in ``call_store``, its budgets in ``budget_store``)."""

from __future__ import annotations

from pathlib import Path

import worker.ledger

MAX_LINES = 400
LEDGER = Path(worker.ledger.__file__).parent


def test_every_ledger_module_is_at_most_400_lines() -> None:
    sizes = {
        str(path.relative_to(LEDGER)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(LEDGER.rglob("*.py"))
    }
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
