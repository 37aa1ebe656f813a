"""Who may use the console: logins from settings and the logins file, Argon2 hashes, two roles.

``reviewer`` claims, answers and releases escalations; ``read_only`` sees every page and
changes nothing. An unknown name is checked against a dummy hash, so that the time a
failed login takes does not tell which names exist.

The logins file (``decisions console add-user``) is re-read when it changes, so a login
added or changed there applies without a restart. Each login has a ``stamp`` (a digest of
its password hash): a session remembers the stamp it logged in with and ends when the
password changes. A name the escalation queue refuses as a reviewer's (``queue``, under
which it holds every waiting escalation, or an empty one) is refused when the logins load:
at start an error naming the setting or file, later a warning (the last good file stays).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from shared.errors import ConfigurationError
from shared.escalations import QUEUE_CONSUMER
from shared.setting_types import ConsoleUser
from worker.console.users_file import read_users_file

__all__ = ["READ_ONLY", "REVIEWER", "Login", "Role", "Users", "hash_password"]

Role = Literal["reviewer", "read_only"]
REVIEWER: Final = "reviewer"
READ_ONLY: Final = "read_only"
#: Longer names or passwords are refused without hashing them.
_MAX_INPUT: Final = 1024

_HASHER = PasswordHasher()
_log = logging.getLogger(__name__)


def hash_password(password: str) -> str:
    """The Argon2id hash to put in ``DECISIONS_CONSOLE_USERS`` or the logins file."""
    if not password:
        raise ValueError("a password must not be empty")
    return _HASHER.hash(password)


@dataclass(frozen=True)
class Login:
    name: str
    role: Role

    @property
    def can_review(self) -> bool:
        return self.role == REVIEWER


def _stamp(user: ConsoleUser) -> str:
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:32]


class Users:
    def __init__(self, users: Mapping[str, ConsoleUser], file: Path | None = None) -> None:
        self._settings = _checked(users, "DECISIONS_CONSOLE_USERS", "rename it there")
        self._file = file
        self._seen: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._users = dict(self._settings)
        self._dummy = _HASHER.hash("not a password of anyone")
        if file is not None:
            # At start a bad file is an error the operator sees; later, the last good one stays.
            self._users = {**self._settings, **self._read_file()}
            self._seen = self._signature()

    def __len__(self) -> int:
        return len(self._current())

    def authenticate(self, name: str, password: str) -> Login | None:
        if len(name) > _MAX_INPUT or len(password) > _MAX_INPUT:
            return None
        user = self._current().get(name)
        try:
            _HASHER.verify(user.password_hash if user else self._dummy, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        if user is None:
            return None
        return Login(name=name, role=user.role)

    def role_of(self, name: str) -> Role | None:
        """The role a session's name has now (a user removed from settings has none)."""
        user = self._current().get(name)
        return user.role if user else None

    def stamp_of(self, name: str) -> str | None:
        """A digest of the login's password hash now (None: no such login)."""
        user = self._current().get(name)
        return _stamp(user) if user else None

    def _current(self) -> dict[str, ConsoleUser]:
        if self._file is None or self._signature() == self._seen:
            return self._users
        with self._lock:
            signature = self._signature()
            if signature != self._seen:
                try:
                    self._users = {**self._settings, **self._read_file()}
                except ConfigurationError as exc:
                    _log.warning("logins file not reloaded, the last good one stays: %s", exc)
                self._seen = signature
        return self._users

    def _read_file(self) -> dict[str, ConsoleUser]:
        assert self._file is not None
        fix = "remove it, and add the login under another name with `decisions console add-user`"
        return _checked(read_users_file(self._file), str(self._file), fix)

    def _signature(self) -> tuple[int, int] | None:
        assert self._file is not None
        try:
            stat = self._file.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size


def _checked(users: Mapping[str, ConsoleUser], where: str, fix: str) -> dict[str, ConsoleUser]:
    """``users``, unless a name is one the escalation queue refuses as a reviewer's: as a login,
    ``queue`` would pass the queue's holder check and resolve escalations nobody claimed."""
    for name in users:
        if name == QUEUE_CONSUMER:
            why = f"the login {name!r} is reserved (the escalation queue's own name)"
        elif not name:
            why = "a login has an empty name"
        else:
            continue
        raise ConfigurationError(f"{where}: {why}: {fix}")
    return dict(users)
