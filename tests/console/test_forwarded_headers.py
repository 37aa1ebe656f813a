"""A real ``decisions console`` believes X-Forwarded-For and X-Forwarded-Proto only from the
proxies ``DECISIONS_CONSOLE_TRUSTED_PROXIES`` names. Before, uvicorn's default believed them
from 127.0.0.1: any local client chose its own address (a new one for each guess escaped the
per-address login throttle; a victim's kept that victim waiting), and its own scheme."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.console.server import Visitor, console_env, console_process, login_events
from tests.console.support import REDIS_DB
from tests.support.services import redis_database
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

#: Addresses a client claims (TEST-NET-3: never a real client's).
CLAIMED = ("203.0.113.9", "203.0.113.10")


def _failed_logins(tmp_path: Path, **extra: str) -> tuple[list[int], list[str], httpx.Response]:
    """Two wrong passwords (for two names), each claiming another address; then the login
    page, claiming https. The statuses, the addresses the log gave them, that page."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    env = console_env(
        REDIS_DB, ledger_url, console_login_free_failures="1", log_format="json", **extra
    )
    log = tmp_path / "console.log"
    statuses = []
    with redis_database(REDIS_DB), console_process(env, log) as (url, _):
        visitor = Visitor(url)
        try:
            for name, address in zip(("bob", "rita"), CLAIMED, strict=True):
                visitor.http.headers["X-Forwarded-For"] = address
                statuses.append(visitor.login(name, "a-guess").status_code)
            visitor.http.cookies.clear()
            page = visitor.http.get("/login", headers={"X-Forwarded-Proto": "https"})
        finally:
            visitor.close()
        time.sleep(0.5)  # the last line written before the process stops
    return statuses, [event["address"] for event in login_events(log)], page


def test_a_client_cannot_name_its_own_address_or_scheme(tmp_path: Path) -> None:
    statuses, addresses, page = _failed_logins(tmp_path)
    # One address: its one free failure spent, the second guess waits.
    assert statuses == [401, 429]
    assert addresses == ["127.0.0.1", "127.0.0.1"]
    assert "secure" not in page.headers["set-cookie"].lower()  # it came over http


def test_a_named_proxy_names_the_client(tmp_path: Path) -> None:
    statuses, addresses, page = _failed_logins(tmp_path, console_trusted_proxies="127.0.0.1")
    assert statuses == [401, 401]  # two clients, one failure each
    assert addresses == list(CLAIMED)
    assert "secure" in page.headers["set-cookie"].lower()  # the proxy took it over https
