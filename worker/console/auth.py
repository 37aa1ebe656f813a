"""Who may use the console: logins from settings and the logins file, Argon2 hashes, two roles.

``reviewer`` claims, answers and releases escalations; ``read_only`` sees every page and
changes nothing. An unknown name is checked against a dummy hash, so that the time a
failed login takes does not tell which names exist.

The logins file (``decisions console add-user``) is re-read when it changes, so a login
added or changed there applies without a restart. Each login has a ``stamp`` (a digest of
its password hash): a session remembers the stamp it logged in with and ends when the
password changes. A name the escalation queue refuses as a reviewer's (``queue``, under
which it holds every waiting escalation, or an empty one) is refused when the logins load:
at start an error naming the setting or file, later a warning (the last good file stays). So
is a ``password_hash`` Argon2 cannot use (a bcrypt hash, a password, an empty or mangled
string): no password could match it, and its refusal, quick where a verify is slow, would tell
an attacker the name exists. Every refused login costs one Argon2 verify, whatever the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from argon2 import PasswordHasher, extract_parameters
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
#: Hashes ``_hash_problem`` found usable. Its check costs a login's verify, so each hash is
#: checked once a process: not again at each re-read of the logins file, nor by the second
#: ``Users`` that ``decisions console`` builds (in ``create_app``).
_USABLE: set[str] = set()
#: Hashes ``_note_parameters`` has warned of (once a process, as ``_USABLE``).
_NOTED: set[str] = set()


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
        self._settings = _checked(
            users,
            "DECISIONS_CONSOLE_USERS",
            rename="rename it there",
            rehash=lambda name, role: "replace it with what "
            "`decisions console hash-password` prints",
        )
        self._file = file
        self._seen: tuple[int, ...] | None = None
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
        """The login, or None. Every None costs one Argon2 verify, as a wrong password does:
        how long a refusal takes must tell nothing (whether the name exists, its hash)."""
        if len(name) > _MAX_INPUT or len(password) > _MAX_INPUT:
            self._spend()  # the input itself is never hashed
            return None
        user = self._current().get(name)
        if user is None:
            self._spend()
            return None
        try:
            _HASHER.verify(user.password_hash, password)
        except VerifyMismatchError:
            return None  # the verify ran in full
        except (VerificationError, ValueError):
            # Refused before any hashing: a hash the loading checks should have stopped
            # (belt and braces), a password with no UTF-8 form; UnicodeEncodeError and
            # InvalidHashError are ValueErrors.
            self._spend()
            return None
        return Login(name=name, role=user.role)

    def _spend(self) -> None:
        """A verify of the dummy hash, failing. Always the same password: Argon2's cost does
        not depend on it (it is digested once, in microseconds), and a password argon2-cffi
        cannot encode would fail it at once."""
        with contextlib.suppress(VerificationError):
            _HASHER.verify(self._dummy, "")

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
        return _checked(
            read_users_file(self._file),
            str(self._file),
            rename="remove it, and add the login under another name with "
            "`decisions console add-user`",
            # add-user's own default role is read_only: name the login's, or it would change.
            rehash=lambda name, role: "set its password again with "
            f"`decisions console add-user {shlex.quote(name)} --role {role}`",
        )

    def _signature(self) -> tuple[int, ...] | None:
        assert self._file is not None
        try:
            stat = self._file.stat()
        except OSError:
            return None
        # Not mtime and size alone: an Argon2 hash has one length, so a changed password
        # leaves the size as it was, and a coarse clock (or one tick) the mtime. add-user
        # replaces the file (a new inode), and any write moves its ctime, which nobody sets.
        return stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size


def _checked(
    users: Mapping[str, ConsoleUser],
    where: str,
    *,
    rename: str,
    rehash: Callable[[str, Role], str],
) -> dict[str, ConsoleUser]:
    """``users``, unless a name is one the escalation queue refuses as a reviewer's (as a login,
    ``queue`` would pass the queue's holder check and resolve escalations nobody claimed), or
    a login's hash is one Argon2 cannot use (``_hash_problem``). The error names the login,
    ``where`` it is, and the fix."""
    for name, user in users.items():
        if name == QUEUE_CONSUMER:
            why, fix = f"the login {name!r} is reserved (the escalation queue's own name)", rename
        elif not name:
            why, fix = "a login has an empty name", rename
        elif problem := _hash_problem(user.password_hash):
            why = f"the login {name!r} has a password_hash that {problem}"
            fix = rehash(name, user.role)
        else:
            _note_parameters(name, user.password_hash, where, rehash(name, user.role))
            continue
        raise ConfigurationError(f"{where}: {why}: {fix}")
    return dict(users)


def _note_parameters(name: str, password_hash: str, where: str, fix: str) -> None:
    """Say once a process when a usable hash was made with other Argon2 parameters than the
    console's (``hash_password``'s): a wrong password for it costs another time than an
    unknown name, checked against the console's dummy, and that difference tells an attacker
    the name exists. It still logs in (refusing it would lock out hashes an older
    argon2-cffi made with its defaults of the day); the operator is told the fix."""
    if password_hash in _NOTED:
        return
    try:
        other = _HASHER.check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError):  # unusable: _hash_problem's to say
        return
    if not other:
        return
    _NOTED.add(password_hash)
    _log.warning(
        "%s: the login %r has a password_hash made with other Argon2 parameters than the "
        "console's (t=%d, m=%d KiB, p=%d): a wrong password for it takes another time than "
        "an unknown name, which tells that the name exists: %s",
        where, name, _HASHER.time_cost, _HASHER.memory_cost, _HASHER.parallelism, fix,
    )


def _hash_problem(password_hash: str) -> str | None:
    """Why no password can match ``password_hash`` (None: Argon2 can use it). Never quotes
    the hash: it may be a password pasted there by mistake."""
    if not password_hash:
        return "is empty"
    if password_hash in _USABLE:
        return None
    # argon2-cffi's own parser, not a pattern of ours: it accepts the forms its verify accepts
    # (argon2id, argon2i and argon2d, the version 1.0 form with no v=) and follows the library
    # when that changes, where a regex of ours would drift from it.
    not_argon2 = "is not an Argon2 hash (one begins $argon2id$v=19$m=)"
    try:
        extract_parameters(password_hash)
    except InvalidHashError:
        return not_argon2
    # The parser reads the shape only, not the salt and digest inside: a hash cut short in
    # its digest, a line break or a non-ASCII letter pasted into it, a salt too short or t=0
    # pass it, and every login would then fail. Argon2's decoder finds these, before any
    # hashing, in the verify a login runs: run that once, with a password nobody has.
    try:
        _HASHER.verify(password_hash, "")
    except VerifyMismatchError:
        pass
    except VerificationError as exc:  # "Decoding failed", "Salt is too short", ...
        return f"Argon2 cannot use ({exc}; cut short or changed?)"
    except InvalidHashError:  # its header: the parser should have said so
        return not_argon2
    except ValueError:  # UnicodeEncodeError: argon2-cffi encodes a hash as ASCII first
        return "Argon2 cannot use (not ASCII; changed?)"
    _USABLE.add(password_hash)
    return None
