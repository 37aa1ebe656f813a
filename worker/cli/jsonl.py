"""Reading a batch file: one job per line; a line that is not JSON is kept, to be rejected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_jobs"]


def read_jobs(path: Path) -> list[Any]:
    jobs: list[Any] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            text = line.strip()
            if not text or text.startswith("//"):
                continue
            try:
                jobs.append(json.loads(text))
            except ValueError:
                # Passed on as text: validation rejects it as "(body): not JSON", nothing is sent.
                jobs.append(text)
    return jobs
