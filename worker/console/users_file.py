"""The logins file: ``{name: {"password_hash": ..., "role": ...}}``, the shape of
``DECISIONS_CONSOLE_USERS``, written by ``decisions console add-user`` and read by the console.

Written whole to a temporary file beside it and renamed over it (a console reading it at that
moment sees the old file or the new one, never half), readable by its owner only.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from shared.errors import ConfigurationError
from shared.setting_types import ConsoleUser

__all__ = ["read_users_file", "write_users_file"]

_USERS: TypeAdapter[dict[str, ConsoleUser]] = TypeAdapter(dict[str, ConsoleUser])


def read_users_file(path: Path) -> dict[str, ConsoleUser]:
    """The logins in ``path`` ({} if there is none); ``ConfigurationError`` naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path}: cannot be read ({type(exc).__name__})") from None
    try:
        return _USERS.validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise ConfigurationError(
            f"{path}: {where}: {first['msg']} (expected "
            '{"NAME": {"password_hash": "...", "role": "reviewer"}})'
        ) from None


def write_users_file(path: Path, users: dict[str, ConsoleUser]) -> None:
    text = json.dumps(
        {name: user.model_dump(mode="json") for name, user in sorted(users.items())}, indent=2
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
