"""The console in-process (its ASGI app served by uvicorn in a thread, on a real Redis)
against what a user or a producer can send it: an escalation id Redis cannot hold is not
found, not a 500; a server error's page carries the same security headers as every other;
bidirectional-text controls in an escalation are shown, not obeyed, while the answers the
form sends keep them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from starlette.applications import Starlette

from shared import keys
from shared.escalations import EscalationQueue
from shared.replies import EscalationMessage
from shared.settings import Settings
from shared.streams import read_stream
from tests.console.server import NO_USERS_FILE, Visitor, console_env
from tests.console.support import REDIS_DB, REPLIES, publish, refused_escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import free_port, postgres_schema, redis_database, redis_url
from worker.console import create_app
from worker.console.headers import CONTENT_SECURITY_POLICY
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

RLO, PDF, LRI, PDI = "\u202e", "\u202c", "\u2066", "\u2069"


def _app(
    where: Path, *, queue: EscalationQueue | None = None, ledger_url: str | None = None
) -> Starlette:
    ledger_url = ledger_url or f"sqlite:///{where / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    users = json.loads(console_env(REDIS_DB, ledger_url)["DECISIONS_CONSOLE_USERS"])
    settings = Settings(
        redis_url=redis_url(REDIS_DB),
        ledger_url=ledger_url,
        console_users=users,
        console_users_file=Path(NO_USERS_FILE),
    )
    return create_app(settings, queue=queue)


@contextmanager
def _visiting(app: Starlette, name: str) -> Iterator[Visitor]:
    """A logged-in visitor of the app, served in this process on a free loopback port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the console did not start"
        time.sleep(0.02)
    visitor = Visitor(f"http://127.0.0.1:{port}")
    try:
        assert visitor.login(name).status_code == 303
        yield visitor
    finally:
        visitor.close()
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


@pytest.mark.parametrize(
    "entry", ["1-99999999999999999999", "18446744073709551616-0", "\u0661-\u0661", "1-1%0A"]
)
def test_an_escalation_id_beyond_what_redis_holds_is_not_found(
    tmp_path: Path, r: redis.Redis, entry: str
) -> None:
    with _visiting(_app(tmp_path), "ann") as ann:
        assert ann.get(f"/escalations/{entry}").status_code == 404
        for move in ("claim", "resolve", "release"):
            response = ann.post(f"/escalations/{entry}/{move}", {})
            assert response.status_code in (303, 404), (move, response.status_code)
            if response.status_code == 303:
                assert ann.follow(response).status_code in (200, 404)


def test_a_server_error_page_carries_the_security_headers(
    tmp_path: Path, r: redis.Redis
) -> None:
    # A queue on a Redis nobody listens on: every escalations page fails. Said as such (503)
    # since a Redis error has its own page; that page, like the 500's, is sent from outside
    # every middleware (``_error_page`` adds the headers to both).
    gone = EscalationQueue(redis.Redis(port=free_port(), socket_connect_timeout=1))
    with _visiting(_app(tmp_path, queue=gone), "ann") as ann:
        # On a new connection: uvicorn closes the one an error page was sent on (the
        # login's redirect to the escalations met the same error).
        cookies = dict(ann.http.cookies)
        url = ann.http.base_url.join("/escalations")
        failed = httpx.get(url, cookies=cookies, timeout=20)
    assert failed.status_code == 503 and "Redis cannot be reached right now" in failed.text
    assert failed.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert failed.headers["x-frame-options"] == "DENY"
    assert failed.headers["x-content-type-options"] == "nosniff"


def _bidi_escalation() -> EscalationMessage:
    message = json.loads(refused_escalation("j1", state=f"pay {RLO}0001${PDF} now").to_json())
    message["detail"] = f"{RLO}refused\x1b[2J"  # and an ESC: a terminal's clear-screen
    message["job_id"] = f"j1{LRI}x{PDI}"
    criteria = message["context"]["questions"]["team"]["criteria"]
    criteria[f"{RLO}gnillib"] = "looks like billing"
    return EscalationMessage.model_validate(message)


def test_bidi_controls_in_an_escalation_are_shown_not_obeyed(
    tmp_path: Path, r: redis.Redis
) -> None:
    publish(r, _bidi_escalation())
    with _visiting(_app(tmp_path), "ann") as ann:
        listing = ann.get("/escalations")
        [item] = open_escalations(EscalationQueue(r))
        assert ann.post(f"/escalations/{item.entry_id}/claim", {}).status_code == 303
        detail = ann.get(f"/escalations/{item.entry_id}")
        for page in (listing, detail):
            assert page.status_code == 200
            for control in (RLO, PDF, LRI, PDI):
                outside_values = page.text.replace(f'value="={RLO}gnillib"', "")
                assert control not in outside_values, (hex(ord(control)), page.url)
        assert "&lt;U+202E&gt;refused&lt;U+001B&gt;[2J" in listing.text
        assert "\x1b" not in listing.text
        assert "pay &lt;U+202E&gt;0001$&lt;U+202C&gt; now" in detail.text
        assert "j1&lt;U+2066&gt;x&lt;U+2069&gt;" in detail.text
        # The option itself is sent as the escalation names it (after the form's prefix),
        # and so accepted.
        assert f'value="={RLO}gnillib"' in detail.text
        done = ann.post(f"/escalations/{item.entry_id}/resolve", {"q1": f"={RLO}gnillib"})
        assert done.status_code == 303, done.text[-2000:]
    [resolution] = [e for e in read_stream(r, REPLIES) if e.type == "resolution"]
    assert json.loads(resolution.message)["answer"]["team"] == f"{RLO}gnillib"


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/batches/view", {"batch": "\x00"}, 404),
        ("/batches/view", {"batch": "b\x00x"}, 404),
        ("/calibration", {"question": "\x00", "since": "-1d"}, 400),
        ("/calibration", {"batch": "a\x1fb"}, 400),
        ("/calibration", {"model": "m\x00"}, 400),
    ],
)
def test_a_control_character_in_a_query_is_a_bad_name_not_a_ledger_outage(
    tmp_path: Path, r: redis.Redis, path: str, params: dict[str, str], status: int
) -> None:
    """Found by an attack: PostgreSQL refuses a NUL in a text parameter (DataError), which the
    pages took for an outage: 503 "Ledger unavailable", and no log line; an operator would
    chase an outage that is not there. No name in the ledger holds a control character."""
    with postgres_schema("console_nul") as url, _visiting(
        _app(tmp_path, ledger_url=url), "ann"
    ) as visitor:
        page = visitor.get(path, **params)
    assert page.status_code == status, page.text[:300]
    assert "Ledger unavailable" not in page.text
    assert "control character" in page.text


def test_a_damaged_redis_key_is_said_on_the_page_not_a_bare_500(
    tmp_path: Path, r: redis.Redis
) -> None:
    """Found by an attack: a non-stream value at the escalation stream's key gave every page
    that reads it a bare 500 "Something went wrong", where the CLI says Redis's one line."""
    r.set(keys.ESCALATION_STREAM, "notastream")
    with _visiting(_app(tmp_path), "ann") as visitor:
        page = visitor.get("/escalations")
    assert page.status_code == 503, page.text[:300]
    assert "WRONGTYPE" in page.text and "Something went wrong" not in page.text
    assert page.headers.get("content-security-policy") == CONTENT_SECURITY_POLICY


def test_an_unforeseen_error_page_carries_the_security_headers(
    tmp_path: Path, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unforeseen(*_: object, **__: object) -> None:
        raise RuntimeError("a job's data: <script>never shown</script>")

    monkeypatch.setattr("worker.console.escalation_views.list_open", unforeseen)
    with _visiting(_app(tmp_path), "ann") as ann:
        cookies = dict(ann.http.cookies)
        failed = httpx.get(ann.http.base_url.join("/escalations"), cookies=cookies, timeout=20)
    assert failed.status_code == 500 and "Something went wrong" in failed.text
    assert "never shown" not in failed.text
    assert failed.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert failed.headers["x-frame-options"] == "DENY"
