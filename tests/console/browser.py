"""Headless Chromium for the console's end-to-end tests: Debian's ``chromium`` through
Playwright's Python package (Playwright's own browser download cannot work here).

Playwright gives every launch a fresh, empty profile (its own ``--user-data-dir``). The
flags keep Chromium off the network it would otherwise try at start (the machine's closed
network refuses those connections). A browser that cannot start is a skip on a laptop and
a failure under CI=true (``tests.support.services.unavailable``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.services import unavailable

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "chromium"]

CHROMIUM = os.environ.get("DECISIONS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a ``playwright.sync_api.Browser``)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("Playwright's Python package (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        unavailable(f"Chromium at {CHROMIUM} (make test installs Debian's chromium as root)")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
            )
        except Error as exc:
            unavailable(f"Chromium at {CHROMIUM} did not start: {str(exc).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()
