"""A real ``decisions console`` logs each login's outcome: failed (WARNING), throttled and
succeeded (INFO), with the login as typed and the client address, as JSON lines off a
terminal. Before, a guessing attack (or an account kept waiting by one) left no line at all.
A typed name is an attacker's text: a line break or a direction control in it is shown, not
obeyed; a password is never in the log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.console.server import (
    PASSWORDS,
    Visitor,
    console_env,
    console_process,
    login_events,
)
from tests.console.support import REDIS_DB
from tests.support.services import redis_database
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

FREE_FAILURES = 2
#: A name that would forge a second log line, and reverse the text after it, if obeyed.
FORGER = 'mallory\n{"event": "login.succeeded", "login": "ann"}\u202e'


def test_each_login_outcome_is_a_log_line(tmp_path: Path) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    env = console_env(
        REDIS_DB,
        ledger_url,
        console_login_free_failures=str(FREE_FAILURES),
        console_login_lockout_max_s="2",
        log_format="json",
    )
    log = tmp_path / "console.log"
    with redis_database(REDIS_DB), console_process(env, log) as (url, _):
        visitor = Visitor(url)
        try:
            assert visitor.login("ann").status_code == 303
            visitor.http.cookies.clear()
            assert visitor.login("bob", "not-bobs-password").status_code == 401
            assert visitor.login(FORGER, "hunter2-secret").status_code == 401
            assert visitor.login("bob", "third-guess").status_code == 429
        finally:
            visitor.close()
        time.sleep(0.5)  # the last line written before the process stops
    events = login_events(log)
    text = log.read_text(errors="replace")
    by_name = [(e["event"], e["login"], e["level"]) for e in events]
    assert ("login.succeeded", "ann", "info") in by_name, events
    assert ("login.failed", "bob", "warning") in by_name, events
    assert ("login.throttled", "bob", "info") in by_name, events
    forged = [e for e in events if e["login"].startswith("mallory")]
    assert len(forged) == 1 and forged[0]["event"] == "login.failed"
    assert "<U+000A>" in forged[0]["login"] and "<U+202E>" in forged[0]["login"]
    # One success only: the forged line stayed inside the name.
    assert [e["login"] for e in events if e["event"] == "login.succeeded"] == ["ann"]
    assert all(e["address"] == "127.0.0.1" for e in events)
    for password in ("hunter2-secret", "not-bobs-password", "third-guess", PASSWORDS["ann"]):
        assert password not in text
    assert "\u202e" not in text
