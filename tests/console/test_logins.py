"""The console attacked through its login, as a real `decisions console` process on a real
Redis: scripted wrong passwords (throttled per account and per address), a burst of
concurrent logins (memory and /healthz stay bounded), cookies replayed after logout or a
password change (refused), Secure cookies and HSTS over HTTPS."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from shared import keys
from shared.setting_types import ConsoleUser
from tests.console.server import Visitor, console_env, console_process
from tests.console.support import REDIS_DB
from tests.support.services import redis_database
from worker.console import hash_password
from worker.console.users_file import write_users_file
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

FREE_FAILURES = 3
MAX_WAIT_S = 4
COOKIE = "decisions_console"


class Served:
    def __init__(self, url: str, pid: int, users_file: Path) -> None:
        self.url = url
        self.pid = pid
        self.users_file = users_file


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    where = tmp_path_factory.mktemp("console-logins")
    users_file = where / "users.json"
    write_users_file(users_file, {"carl": ConsoleUser(password_hash=hash_password("carl-1"))})
    env = console_env(
        REDIS_DB,
        _ledger(where),
        console_users_file=str(users_file),
        console_login_free_failures=str(FREE_FAILURES),
        console_login_lockout_max_s=str(MAX_WAIT_S),
        console_password_checks="2",
        # As behind a TLS proxy on this machine: its X-Forwarded-Proto is believed.
        console_trusted_proxies="127.0.0.1",
    )
    with redis_database(REDIS_DB), console_process(env, where / "console.log") as (url, proc):
        yield Served(url, proc.pid, users_file)


@pytest.fixture
def r(served: Served) -> Iterator[redis.Redis]:
    # Emptied before and after: no test inherits another's failures, locks or sessions.
    with redis_database(REDIS_DB) as client:
        yield client


@pytest.fixture
def visitor(served: Served, r: redis.Redis) -> Iterator[Visitor]:
    made = Visitor(served.url)
    yield made
    made.close()


def test_thirty_wrong_passwords_then_the_right_one_is_refused_until_the_wait_is_over(
    visitor: Visitor,
) -> None:
    started = time.monotonic()
    statuses = [visitor.login("ann", f"guess-{i}").status_code for i in range(30)]
    elapsed = time.monotonic() - started
    assert statuses[: FREE_FAILURES + 1] == [401] * FREE_FAILURES + [429]
    assert set(statuses) == {401, 429}
    # A guess is checked only when a wait is over (2 s, then 4): a slow loop gets a few more.
    assert statuses.count(401) <= FREE_FAILURES + 1 + elapsed / 2, (statuses, elapsed)

    # Right after a checked guess the account waits again: the right password is refused.
    while (guess := visitor.login("ann", "one-more")).status_code == 429:
        time.sleep(float(guess.headers["retry-after"]))
    assert guess.status_code == 401
    right = visitor.login("ann")
    assert right.status_code == 429 and "try again in" in right.text
    wait = int(right.headers["retry-after"])
    assert 1 <= wait <= MAX_WAIT_S
    assert visitor.get("/escalations").status_code == 303
    time.sleep(wait + 0.2)
    assert visitor.login("ann").status_code == 303
    assert visitor.get("/escalations").status_code == 200


def test_wrong_logins_over_many_names_lock_the_address(visitor: Visitor) -> None:
    for i in range(FREE_FAILURES):
        assert visitor.login(f"nobody-{i}", "x").status_code == 401
    # Each name failed once, but the address must wait now: even for bob's right password.
    assert visitor.login("bob").status_code == 429


def test_a_burst_of_logins_keeps_memory_and_health_bounded(
    served: Served, visitor: Visitor
) -> None:
    before = _rss_mib(served.pid, "VmRSS")
    token = visitor.token or _token(visitor)
    cookies = dict(visitor.http.cookies)

    # Clients made first: making 24 of them at once would slow this process, not the console.
    clients = [httpx.Client(base_url=served.url, cookies=cookies, timeout=60) for _ in range(24)]
    probe = httpx.Client(base_url=served.url, timeout=30)

    def attempt(i: int) -> int:
        body = {"csrf_token": token, "username": f"burst-{i}", "password": "wrong"}
        return clients[i].post("/login", data=body).status_code

    with ThreadPoolExecutor(24) as pool:
        running = [pool.submit(attempt, i) for i in range(24)]
        time.sleep(0.3)
        started = time.monotonic()
        health = probe.get("/healthz")
        health_s = time.monotonic() - started
        statuses = [f.result() for f in running]
    for client in [*clients, probe]:
        client.close()
    # Loose for a shared 2-core machine: the old console took 9 s here with 24 logins.
    assert health.status_code == 200 and health_s < 4.0, health_s
    assert set(statuses) <= {401, 429, 503}
    grown = _rss_mib(served.pid, "VmHWM") - before
    # Two Argon2 checks at 64 MiB each at most, not 24 (1.5 GiB).
    assert grown < 300, f"the console grew {grown:.0f} MiB"


def test_a_cookie_replayed_after_logout_is_refused(served: Served, visitor: Visitor) -> None:
    anonymous = visitor.get("/login").cookies.get(COOKIE) or visitor.http.cookies.get(COOKIE)
    assert visitor.login("ann").status_code == 303
    cookie = visitor.http.cookies[COOKIE]
    assert cookie != anonymous  # a new id at login: one seen before is worth nothing
    with httpx.Client(base_url=served.url, cookies={COOKIE: cookie}) as thief:
        assert thief.get("/escalations").status_code == 200
        assert visitor.post("/logout", {}).status_code == 303
        replayed = thief.get("/escalations")
    assert replayed.status_code == 303 and replayed.headers["location"].startswith("/login")


def test_the_cookie_is_only_a_random_id_of_a_session_kept_in_redis(
    visitor: Visitor, r: redis.Redis
) -> None:
    assert visitor.login("ann").status_code == 303
    cookie = visitor.http.cookies[COOKIE]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie)
    stored = r.get(keys.console_session(hashlib.sha256(cookie.encode()).hexdigest()))
    assert stored is not None and b'"user":"ann"' in stored
    assert r.get(keys.console_session(cookie)) is None  # kept by its hash, never the cookie
    ttl = r.ttl(keys.console_session(hashlib.sha256(cookie.encode()).hexdigest()))
    assert 0 < ttl <= 8 * 3600


def test_a_password_change_ends_the_sessions_of_that_login(
    served: Served, visitor: Visitor
) -> None:
    assert visitor.login("carl", "carl-1").status_code == 303
    assert visitor.get("/escalations").status_code == 200
    write_users_file(
        served.users_file, {"carl": ConsoleUser(password_hash=hash_password("carl-2"))}
    )
    assert visitor.get("/escalations").status_code == 303
    assert visitor.login("carl", "carl-1").status_code == 401
    assert visitor.login("carl", "carl-2").status_code == 303
    assert visitor.get("/escalations").status_code == 200


def test_cookies_are_secure_and_hsts_sent_when_the_request_came_over_https(
    served: Served, r: redis.Redis
) -> None:
    plain = httpx.get(f"{served.url}/login")
    assert "secure" not in plain.headers["set-cookie"].lower()
    assert "strict-transport-security" not in plain.headers
    # X-Forwarded-Proto from a proxy named in DECISIONS_CONSOLE_TRUSTED_PROXIES: it was https.
    proxied = httpx.get(f"{served.url}/login", headers={"X-Forwarded-Proto": "https"})
    assert "; Secure" in proxied.headers["set-cookie"]
    assert "HttpOnly" in proxied.headers["set-cookie"]
    assert "SameSite=Strict" in proxied.headers["set-cookie"]
    assert proxied.headers["strict-transport-security"].startswith("max-age=")


def test_the_https_setting_makes_cookies_secure_and_sends_hsts(
    tmp_path: Path, r: redis.Redis
) -> None:
    env = console_env(REDIS_DB, _ledger(tmp_path), console_https_only="true")
    with console_process(env, tmp_path / "console.log") as (url, _):
        page = httpx.get(f"{url}/login")
    assert "; Secure" in page.headers["set-cookie"]
    assert page.headers["strict-transport-security"] == "max-age=31536000"


def _ledger(where: Path) -> str:
    url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(url) as ledger:
        ledger.migrate()
    return url


def _token(visitor: Visitor) -> str:
    visitor.get("/login")
    return visitor.token


def _rss_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


def test_only_a_page_with_a_form_gives_an_anonymous_visitor_a_session(
    visitor: Visitor, r: redis.Redis
) -> None:
    sessions = keys.console_session("*")
    for path in ("/no-such-page", "/escalations", "/batches/nope", "/static/nothing.css"):
        response = visitor.get(path)
        assert response.status_code in {303, 404}, (path, response.status_code)
        assert "set-cookie" not in response.headers, path
    assert list(r.scan_iter(sessions)) == []
    login_page = visitor.get("/login")
    assert login_page.status_code == 200 and "set-cookie" in login_page.headers
    assert len(list(r.scan_iter(sessions))) == 1  # its form's token needs one
