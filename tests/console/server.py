"""A real ``decisions console`` process for the console's tests, and its logins."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import DECISIONS, decisions_env, stop, wait_http
from tests.support.services import free_port, redis_url
from worker.console import hash_password

__all__ = [
    "CANARY_KEY",
    "PASSWORDS",
    "Visitor",
    "console_env",
    "console_process",
    "console_server",
    "login_events",
]

PASSWORDS = {"ann": "ann-pass-1", "bob": "bob-pass-2", "rita": "rita-pass-3"}
ROLES = {"ann": "reviewer", "bob": "reviewer", "rita": "read_only"}
#: Must never appear on a page: a provider key in the console's environment, its secret.
CANARY_KEY = "sk-or-v1-canary0123456789abcdef"
#: No logins file unless a test names one (never one in the directory the tests run from).
NO_USERS_FILE = "/nonexistent/console-users.json"
_HASHES = {name: hash_password(password) for name, password in PASSWORDS.items()}
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def console_env(redis_db: int, ledger_url: str, **extra: str) -> dict[str, str]:
    users = {name: {"password_hash": _HASHES[name], "role": ROLES[name]} for name in PASSWORDS}
    env = decisions_env(
        redis_url=redis_url(redis_db),
        broker_url=redis_url(redis_db),
        ledger_url=ledger_url,
        console_users=json.dumps(users),
        **{"console_users_file": NO_USERS_FILE, **extra},
    )
    env["OPENROUTER_API_KEY"] = CANARY_KEY
    return env


def login_events(log: Path) -> list[dict[str, Any]]:
    """The ``login.*`` lines of a console's JSON log, in order."""
    events = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and str(event.get("event", "")).startswith("login."):
            events.append(event)
    return events


@contextmanager
def console_server(env: dict[str, str], log: Path) -> Iterator[str]:
    """``decisions console`` on a free loopback port; yields its base URL."""
    with console_process(env, log) as (url, _):
        yield url


@contextmanager
def console_process(
    env: dict[str, str], log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``decisions console`` on a free loopback port; yields its base URL and process."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [DECISIONS, "console", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{url}/healthz", proc, timeout_s=60)
            yield url, proc
        finally:
            stop(proc)


class Visitor:
    """One browser-less session: cookies, and the CSRF token of the last page it saw."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, follow_redirects=False, timeout=20)
        self.token = ""

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **params: str) -> httpx.Response:
        response = self.http.get(path, params=params or None)
        self._remember(response)
        return response

    def post(self, path: str, data: dict[str, str], *, token: str | None = None) -> httpx.Response:
        body = {"csrf_token": self.token if token is None else token, **data}
        response = self.http.post(path, data=body)
        self._remember(response)
        return response

    def follow(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code == 303, response.text[:500]
        return self.get(response.headers["location"])

    def login(self, name: str, password: str | None = None) -> httpx.Response:
        self.get("/login")
        response = self.post(
            "/login",
            {"username": name, "password": password if password is not None else PASSWORDS[name]},
        )
        if response.status_code == 303:
            # The token is renewed at login: the next page carries the one forms need now.
            self.get(response.headers["location"])
        return response

    def _remember(self, response: httpx.Response) -> None:
        found = _CSRF.search(response.text)
        if found:
            self.token = found.group(1)
