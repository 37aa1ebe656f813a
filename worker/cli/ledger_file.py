"""What is wrong with a SQLite ledger's file, when SQLite cannot write it.

SQLite names no file and no cause: "attempt to write a readonly database", "database or disk
is full", "unable to open database file", "disk I/O error". The file is the one
``DECISIONS_LEDGER_URL`` names; why it cannot be written (opened ``?mode=ro``, a file system
mounted read-only, a file or directory this user may not write, no space left) is asked of
the system here, so that the explanation names the file and its fix in one line each.

None of these mends itself while a command waits: ``cannot_write`` tells ``decisions run``
to stop on the first task that retried for one (``worker.cli.run``). A fleet worker is asked
``unwritable`` before it starts (``worker.cli.startup``): it would otherwise take every
message and retry each for ever, since the writes fail only once a job is opened.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from worker.cli.explanation import RUNTIME, USAGE, Explanation, raw_setting

__all__ = ["cannot_write", "file_problem", "sqlite_path", "unwritable"]

READ_ONLY = "attempt to write a readonly database"
FULL = "database or disk is full"
CANNOT_OPEN = "unable to open database file"
IO_ERROR = "disk I/O error"
LOCKED = "database is locked"
#: What SQLite says when it cannot write the ledger's file (or the files beside it).
CANNOT_WRITE = (READ_ONLY, FULL, CANNOT_OPEN, IO_ERROR)
#: Under this much space left, a write error of SQLite's is a full disk.
NEARLY_FULL_BYTES = 64 * 1024
FIX_WRITABLE = (
    "make the file and its directory writable by this user, or point DECISIONS_LEDGER_URL at "
    "a file that is"
)


def sqlite_path(url: str) -> Path | None:
    """The absolute path of the file a SQLite URL names; None for another database, an
    in-memory one or a URL that does not parse."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = str(parsed.database)
    if database.startswith("file:"):  # a URI filename (?uri=true): file:/path?mode=ro
        database = urlsplit(database).path
    return Path(os.path.abspath(database))


def cannot_write(error: BaseException) -> bool:
    """Whether ``error`` is SQLite failing to write the ledger's file."""
    text = str(error)
    return sqlite_path(raw_setting("ledger_url")) is not None and any(
        said in text for said in CANNOT_WRITE
    )


def file_problem(detail: str) -> Explanation | None:
    """The explanation of SQLite's ``detail`` (its message) about the ledger's file, or None
    when the ledger is not a SQLite file or the message is about something else."""
    url = raw_setting("ledger_url")
    path = sqlite_path(url)
    if path is None:
        return None
    if READ_ONLY in detail:
        return _read_only(path, url)
    if LOCKED in detail:  # passes when the other process commits: retried, not fatal
        return Explanation(
            f"the ledger at {path} stayed locked by another process past "
            f"DECISIONS_SQLITE_BUSY_TIMEOUT_S={raw_setting('sqlite_busy_timeout_s')} s",
            "let that process finish (or stop it), or raise DECISIONS_SQLITE_BUSY_TIMEOUT_S",
            RUNTIME,
        )
    if FULL in detail or (IO_ERROR in detail and _free_bytes(path) < NEARLY_FULL_BYTES):
        # A full tmpfs fails SQLite's shared-memory file with an I/O error, not "full".
        return _full(path)
    if CANNOT_OPEN in detail and path.parent.is_dir():
        why = _why_read_only(path, url)
        if why is not None:
            return Explanation(f"the ledger at {path} cannot be written: {why}", FIX_WRITABLE)
        return None  # a directory that is not there: said with the URL (connection_errors)
    if IO_ERROR in detail:
        return Explanation(
            f"the ledger at {path}: SQLite could not read or write it (disk I/O error)",
            "check the disk it is on (the kernel log says why), then run the command again",
            RUNTIME,
        )
    return None


def unwritable(url: str) -> Explanation | None:
    """Why the SQLite ledger file ``url`` names cannot be written at all now (opened
    read-only, a read-only mount, a file or directory this user may not write, a full
    disk); None when nothing says so, or for another database. Asked of the system, not of
    SQLite: ``BEGIN IMMEDIATE`` succeeds on a read-only file, and only a real write fails."""
    path = sqlite_path(url)
    if path is None or not path.parent.is_dir():
        return None  # no directory: said with the URL when the ledger is opened
    if _why_read_only(path, url) is not None:
        return _read_only(path, url)
    if _free_bytes(path) < NEARLY_FULL_BYTES:
        return _full(path)
    return None


def _full(path: Path) -> Explanation:
    return Explanation(
        f"the ledger at {path} cannot be written: its disk is full "
        f"({_free_bytes(path):,} bytes free)",
        "free space on that disk, or point DECISIONS_LEDGER_URL at a file on another; "
        "then run the command again",
        RUNTIME,
    )


def _read_only(path: Path, url: str) -> Explanation:
    why = _why_read_only(path, url) or "SQLite may not write it"
    fix = FIX_WRITABLE
    if "mode=ro" in why:
        fix = "remove ?mode=ro from DECISIONS_LEDGER_URL: this command writes the ledger"
    return Explanation(f"the ledger at {path} is read-only: {why}", fix, USAGE)


def _why_read_only(path: Path, url: str) -> str | None:
    """Why this process may not write ``path`` (or create it, or the files SQLite keeps
    beside it), or None if nothing here says it may not. ``os.access`` answers for root
    too where a mount is read-only, and ``statvfs`` says whether it is."""
    query = make_url(url).query
    database = str(make_url(url).database or "")
    if query.get("mode") == "ro" or "mode=ro" in database:
        return "it is opened ?mode=ro (DECISIONS_LEDGER_URL)"
    if query.get("immutable") == "1" or "immutable=1" in database:
        return "it is opened ?immutable=1 (DECISIONS_LEDGER_URL)"
    directory = path.parent
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return f"its file system (where {directory} is) is mounted read-only"
    except OSError:
        return None
    if path.exists() and not os.access(path, os.W_OK):
        return "this user may not write the file"
    if not os.access(directory, os.W_OK):
        return f"this user may not write its directory {directory} (SQLite keeps files there)"
    for suffix in ("-wal", "-shm", "-journal"):
        beside = path.with_name(path.name + suffix)
        if beside.exists() and not os.access(beside, os.W_OK):
            return f"this user may not write {beside}"
    return None


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return NEARLY_FULL_BYTES  # not known: not taken for full
