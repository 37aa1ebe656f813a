"""Who may use the console: logins from settings, Argon2 password hashes, two roles.

``reviewer`` claims, answers and releases escalations; ``read_only`` sees every page and
changes nothing. An unknown name is checked against a dummy hash, so that the time a
failed login takes does not tell which names exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from shared.settings import ConsoleUser

__all__ = ["READ_ONLY", "REVIEWER", "Login", "Role", "Users", "hash_password"]

Role = Literal["reviewer", "read_only"]
REVIEWER: Final = "reviewer"
READ_ONLY: Final = "read_only"

_HASHER = PasswordHasher()


def hash_password(password: str) -> str:
    """The Argon2id hash to put in ``DECISIONS_CONSOLE_USERS``."""
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


class Users:
    def __init__(self, users: Mapping[str, ConsoleUser]) -> None:
        self._users = dict(users)
        self._dummy = _HASHER.hash("not a password of anyone")

    def __len__(self) -> int:
        return len(self._users)

    def authenticate(self, name: str, password: str) -> Login | None:
        user = self._users.get(name)
        try:
            _HASHER.verify(user.password_hash if user else self._dummy, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        if user is None:
            return None
        return Login(name=name, role=user.role)

    def role_of(self, name: str) -> Role | None:
        """The role a session's name has now (a user removed from settings has none)."""
        user = self._users.get(name)
        return user.role if user else None
