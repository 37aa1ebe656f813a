"""`decisions console add-user`: prompts for the password, writes the logins file the console
reads (owner-only), changes a login in place, and says what is wrong in one line."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from typer.testing import CliRunner

from shared.errors import ConfigurationError
from shared.setting_types import ConsoleUser
from shared.settings import get_settings
from worker.cli import app
from worker.console import Users


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the person types at each password prompt, in order."""
    answers: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt="": answers.pop(0))
    yield answers


def add_user(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["console", "add-user", *args])
    return result.exit_code, result.output


def test_add_user_writes_a_login_the_console_accepts(tmp_path: Path, typed: list[str]) -> None:
    users = tmp_path / "users.json"
    typed += ["s3cret-pass", "s3cret-pass"]
    code, out = add_user("dana", "--role", "reviewer", "--file", str(users))
    assert code == 0, out
    assert "added dana (reviewer)" in out
    saved = json.loads(users.read_text())
    assert saved["dana"]["role"] == "reviewer"
    assert PasswordHasher().verify(saved["dana"]["password_hash"], "s3cret-pass")
    assert "s3cret-pass" not in users.read_text()
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    login = Users({}, users).authenticate("dana", "s3cret-pass")
    assert login is not None and login.can_review

    # The same name again changes its password (and role) in place; others stay.
    typed += ["other-pass", "other-pass"]
    assert add_user("erik", "--file", str(users))[0] == 0
    typed += ["new-pass", "new-pass"]
    code, out = add_user("dana", "--role", "read_only", "--file", str(users))
    assert code == 0 and "updated dana (read_only)" in out
    users_now = Users({}, users)
    assert users_now.authenticate("dana", "s3cret-pass") is None
    changed = users_now.authenticate("dana", "new-pass")
    assert changed is not None and not changed.can_review
    assert users_now.authenticate("erik", "other-pass") is not None


def test_add_user_refuses_mistakes_in_one_line(tmp_path: Path, typed: list[str]) -> None:
    users = tmp_path / "users.json"
    typed += ["one", "two"]
    code, out = add_user("dana", "--file", str(users))
    assert code == 2 and "the two passwords differ" in out and not users.exists()
    code, out = add_user("dana", "--role", "admin", "--file", str(users))
    assert code == 2 and "reviewer or read_only" in out
    code, out = add_user("queue", "--file", str(users))
    assert code == 2 and "reserved" in out
    # A path longer than a line: named whole (rich once folded it at 80 columns).
    users = tmp_path / ("a-folder-with-a-long-name-" * 4) / "users.json"
    users.parent.mkdir()
    users.write_text("{not json")
    typed += ["pw", "pw"]
    code, out = add_user("dana", "--file", str(users))
    assert code == 2 and str(users) in out and "Traceback" not in out


def test_add_user_writes_where_the_console_reads_by_default(
    tmp_path: Path, typed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS_FILE", str(tmp_path / "from-settings.json"))
    get_settings.cache_clear()
    try:
        typed += ["pw-1", "pw-1"]
        assert add_user("dana")[0] == 0
        assert "dana" in json.loads((tmp_path / "from-settings.json").read_text())
    finally:
        get_settings.cache_clear()


def test_a_reserved_login_is_refused_when_the_logins_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "queue" is the name the escalation queue holds waiting entries under: a login of that
    # name would resolve escalations nobody claimed.
    login = {"password_hash": PasswordHasher().hash("pw"), "role": "reviewer"}
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"queue": login}))
    with pytest.raises(ConfigurationError) as from_file:
        Users({}, users)
    assert str(users) in str(from_file.value) and "'queue' is reserved" in str(from_file.value)
    with pytest.raises(ConfigurationError) as from_settings:
        Users({"queue": ConsoleUser.model_validate(login)})
    assert "DECISIONS_CONSOLE_USERS" in str(from_settings.value)

    # `decisions console` says so in one line and does not start.
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS", json.dumps({"queue": login}))
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS_FILE", str(tmp_path / "none.json"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["console"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert "refusing to start" in result.output and "'queue' is reserved" in result.output
    assert "Traceback" not in result.output

    # Written into the file of a running console, it is not taken: the last good file stays.
    users.write_text(json.dumps({"dana": login}))
    running = Users({}, users)
    users.write_text(json.dumps({"dana": login, "queue": login}) + " ")
    assert running.role_of("queue") is None and running.role_of("dana") == "reviewer"


def test_a_password_changed_within_one_timestamp_tick_is_seen(
    tmp_path: Path, typed: list[str]
) -> None:
    users = tmp_path / "users.json"
    typed += ["old-pass-1", "old-pass-1"]
    assert add_user("dana", "--file", str(users))[0] == 0
    running = Users({}, users)
    assert running.authenticate("dana", "old-pass-1") is not None
    before = users.stat()
    typed += ["new-pass-2", "new-pass-2"]
    assert add_user("dana", "--file", str(users))[0] == 0
    # An Argon2 hash has one length: the new file is as long as the old, and written within
    # the same tick of a coarse clock it has the same mtime too (set back here to be so).
    assert users.stat().st_size == before.st_size
    os.utime(users, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert running.authenticate("dana", "old-pass-1") is None
    assert running.authenticate("dana", "new-pass-2") is not None
