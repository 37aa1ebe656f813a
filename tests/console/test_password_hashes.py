"""A login whose ``password_hash`` Argon2 cannot use (a bcrypt hash, a password pasted as it
is, an empty string, a hash cut short or mangled) is refused where the logins load: at start
an error naming the login, the setting or file, and the command that makes a hash; later a
warning, and the last good logins file stays. And every refused login costs one Argon2
verify, so how long a refusal takes never tells whether the name exists."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from argon2 import PasswordHasher
from argon2.exceptions import VerifyMismatchError
from typer.testing import CliRunner, Result

from shared.errors import ConfigurationError
from shared.setting_types import ConsoleUser
from shared.settings import get_settings
from worker.cli import app
from worker.console import Users, auth

GOOD = PasswordHasher().hash("dana-pass-1")
_SALT, _DIGEST = GOOD.split("$")[-2:]

#: Hashes the hasher refuses: some without looking at them twice (not ``$argon2...``), some
#: only in Argon2's own decoder (they parse as ``$argon2id$v=19$m=...,t=...,p=...$...$...``).
UNUSABLE = {
    "bcrypt": "$2b$12$KIXQJQ8r3n5Vh0P2Zf3bUe8y1vY7gq8m4dP9Q0x1sL2c3V4b5N6m7",
    "a password": "dana-pass-1",
    "empty": "",
    "cut in the salt": GOOD[: GOOD.rindex("$") - 3],
    # 41 base64 characters are 30 bytes and 6 bits: never a whole digest.
    "cut in the digest": GOOD[:-2],
    "a line break pasted in": GOOD[:-10] + "\n" + GOOD[-10:],
    "not ASCII": GOOD[:-3] + "é" + GOOD[-2:],
    "salt too short": GOOD.replace(_SALT, "c2FsdA"),
    "no time cost": GOOD.replace(",t=3,", ",t=0,"),
}


def _login(password_hash: str) -> ConsoleUser:
    return ConsoleUser(password_hash=password_hash, role="reviewer")


@pytest.mark.parametrize("bad", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_hash_in_the_setting_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Users({"ann": _login(GOOD), "dana": _login(bad)})
    message = str(refused.value)
    assert message.startswith("DECISIONS_CONSOLE_USERS: the login 'dana' ")
    assert "`decisions console hash-password`" in message
    assert len(message.splitlines()) <= 2
    if bad:  # It may be a password pasted by mistake: never shown.
        assert bad not in message


@pytest.mark.parametrize("bad", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_hash_in_the_file_is_refused_at_start(tmp_path: Path, bad: str) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"dana": {"password_hash": bad, "role": "reviewer"}}))
    with pytest.raises(ConfigurationError) as refused:
        Users({}, users)
    message = str(refused.value)
    assert message.startswith(f"{users}: the login 'dana' ")
    # The fix keeps the login's role (add-user's default is read_only).
    assert "`decisions console add-user dana --role reviewer`" in message
    assert len(message.splitlines()) <= 2
    if bad:
        assert bad not in message


def test_the_console_does_not_start_and_says_which_login_and_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: list[str]
) -> None:
    users = tmp_path / "users.json"
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS_FILE", str(users))
    # Were the logins let through, the console would go on to open its ledger: not in the cwd.
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS", json.dumps({"ann": {"password_hash": "x"}}))
    out = _decisions("console")
    assert out.exit_code == 2, out.output
    assert "refusing to start" in out.output and "Traceback" not in out.output
    assert "DECISIONS_CONSOLE_USERS: the login 'ann'" in out.output
    assert "decisions console hash-password" in out.output

    monkeypatch.setenv("DECISIONS_CONSOLE_USERS", "{}")
    users.write_text(json.dumps({"dana": {"password_hash": "$2b$12$abc", "role": "reviewer"}}))
    out = _decisions("console")
    assert out.exit_code == 2, out.output
    assert "refusing to start" in out.output and "Traceback" not in out.output
    assert f"{users}: the login 'dana'" in out.output
    assert "decisions console add-user dana --role reviewer" in out.output

    # Doing what it says mends the file: add-user reads it whatever its hashes are.
    typed += ["dana-pass-2", "dana-pass-2"]
    added = _decisions("console", "add-user", "dana", "--role", "reviewer")
    assert added.exit_code == 0, added.output
    login = Users({}, users).authenticate("dana", "dana-pass-2")
    assert login is not None and login.can_review


def test_an_unusable_hash_written_while_running_is_not_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"dana": {"password_hash": GOOD, "role": "reviewer"}}))
    running = Users({}, users)
    users.write_text(
        json.dumps(
            {
                "dana": {"password_hash": UNUSABLE["cut in the digest"], "role": "reviewer"},
                "erik": {"password_hash": GOOD},
            }
        )
    )
    with caplog.at_level(logging.WARNING, logger=auth.__name__):
        # The last good file stays, whole: dana keeps her password, erik is not added yet.
        login = running.authenticate("dana", "dana-pass-1")
        assert login is not None and login.can_review
        assert running.role_of("erik") is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "last good one stays" in warned[0] and f"{users}: the login 'dana'" in warned[0]
    assert "decisions console add-user dana --role reviewer" in warned[0]


class _CountingHasher(PasswordHasher):
    """The console's hasher, counting the verifies Argon2 ran in full (a match or a
    mismatch); one refused before any hashing (a hash it cannot read) does not count."""

    def __init__(self) -> None:
        super().__init__()
        self.full = 0

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        try:
            matched = super().verify(hash, password)
        except VerifyMismatchError:
            self.full += 1
            raise
        self.full += 1
        return matched


@pytest.fixture
def hasher(monkeypatch: pytest.MonkeyPatch) -> Iterator[_CountingHasher]:
    counting = _CountingHasher()
    monkeypatch.setattr(auth, "_HASHER", counting)
    yield counting


def test_every_refusal_costs_one_argon2_verify(
    hasher: _CountingHasher, monkeypatch: pytest.MonkeyPatch
) -> None:
    mangled = UNUSABLE["a line break pasted in"]
    # As if a hash Argon2 cannot use got past the loading checks (belt and braces).
    monkeypatch.setattr(auth, "_hash_problem", lambda password_hash: None, raising=False)
    users = Users({"dana": _login(GOOD), "odd": _login(mangled), "eve": _login("plain")})
    attempts = {
        "right password": ("dana", "dana-pass-1"),
        "wrong password": ("dana", "guess"),
        "unknown name": ("nobody", "guess"),
        "a hash Argon2 cannot decode": ("odd", "guess"),
        "a hash that is not Argon2": ("eve", "plain"),
        "a name too long": ("dana" * 300, "guess"),
        "a password too long": ("dana", "g" * 2000),
    }
    spent = {}
    for what, (name, password) in attempts.items():
        hasher.full = 0
        login = users.authenticate(name, password)
        assert (login is not None) == (what == "right password"), what
        spent[what] = hasher.full
    assert spent == dict.fromkeys(attempts, 1)


def test_a_hash_that_is_not_ascii_is_refused_not_raised(
    hasher: _CountingHasher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # argon2-cffi encodes a hash as ASCII before looking at it: UnicodeEncodeError, a 500.
    monkeypatch.setattr(auth, "_hash_problem", lambda password_hash: None, raising=False)
    users = Users({"dana": _login(UNUSABLE["not ASCII"])})
    assert users.authenticate("dana", "dana-pass-1") is None
    assert hasher.full == 1


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the person types at each password prompt, in order."""
    answers: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt="": answers.pop(0))
    yield answers


def _decisions(*args: str) -> Result:
    """The command with this test's environment, leaving no settings cached for the next."""
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        get_settings.cache_clear()


def test_the_refusal_shows_a_name_that_looks_like_terminal_markup_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # add-user takes any name: "[/]" once made the terminal's markup raise (a traceback).
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"[/]dana": {"password_hash": "", "role": "reviewer"}}))
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS_FILE", str(users))
    monkeypatch.setenv("DECISIONS_CONSOLE_USERS", "{}")
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    out = _decisions("console")
    assert out.exit_code == 2, out.output
    assert "refusing to start" in out.output and "Traceback" not in out.output
    assert "the login '[/]dana' has a password_hash that is empty" in out.output
    assert "decisions console add-user '[/]dana' --role reviewer" in out.output


def test_a_hash_made_with_other_parameters_is_named_once_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Such a hash works, but a wrong password for it costs another time than an unknown
    name's (the dummy's parameters are the console's): that difference tells the name
    exists. The operator is told which login, and how to make a hash of the console's own."""
    cheaper = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("eve-pass-1")
    caplog.set_level(logging.WARNING, logger="worker.console.auth")
    users = Users({"ann": _login(GOOD), "eve": _login(cheaper)})
    Users({"ann": _login(GOOD), "eve": _login(cheaper)})  # read again: said once a process
    warned = [r.getMessage() for r in caplog.records if "eve" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "other Argon2 parameters" in warned[0]
    assert "`decisions console hash-password`" in warned[0]
    assert cheaper not in warned[0]
    assert not [r for r in caplog.records if "'ann'" in r.getMessage()]
    login = users.authenticate("eve", "eve-pass-1")  # it still logs in
    assert login is not None and login.name == "eve"
