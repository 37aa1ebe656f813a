"""Every ``DECISIONS_CONSOLE_*`` variable the console's docs and sources name is a setting
(``decisions settings``). docker-compose.yml told operators to set
DECISIONS_CONSOLE_SECRET_KEY, which sessions in Redis had made unused: it was ignored."""

from __future__ import annotations

import re
from pathlib import Path

from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
_NAMED = re.compile(r"\bDECISIONS_CONSOLE_[A-Z0-9_]*[A-Z0-9]")


def _documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "docker-compose.yml", ROOT / "ARCHITECTURE.md"]
    for folder in ("deploy", "worker/console", "worker/cli"):
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix != ".pyc"]
    return found


def test_each_console_variable_named_is_a_setting() -> None:
    settings = {f"DECISIONS_{name.upper()}" for name in Settings.model_fields}
    named = {
        (path.relative_to(ROOT).as_posix(), variable)
        for path in _documents()
        for variable in _NAMED.findall(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert len(named) > 10  # the check reads the files that name them
    assert {found for found in named if found[1] not in settings} == set()
