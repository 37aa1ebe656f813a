"""The console over HTTP, as a real `decisions console` process on the real Redis and ledger:
logins and roles, CSRF on every form, escaping, no secrets, answers checked and published."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator

import pytest
import redis
from PIL import Image

from shared.escalations import EscalationQueue
from shared.streams import read_stream
from tests.console.server import (
    CANARY_KEY,
    PASSWORDS,
    Visitor,
    console_env,
    console_server,
)
from tests.console.support import (
    REDIS_DB,
    REPLIES,
    finished_job,
    menu_escalation,
    publish,
    refused_escalation,
)
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database
from worker.console import menu_checker
from worker.console.app import _routes
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

XSS = "<script>window.__pwned = 1</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    where = tmp_path_factory.mktemp("console-http")
    ledger_url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    env = console_env(REDIS_DB, ledger_url)
    with redis_database(REDIS_DB), console_server(env, where / "console.log") as url:
        yield url, ledger_url


@pytest.fixture
def r(served: tuple[str, str]) -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


@pytest.fixture
def url(served: tuple[str, str]) -> str:
    return served[0]


@pytest.fixture
def visitors(url: str) -> Iterator[dict[str, Visitor]]:
    made = {name: Visitor(url) for name in PASSWORDS}
    yield made
    for visitor in made.values():
        visitor.close()


def logged_in(visitors: dict[str, Visitor], name: str) -> Visitor:
    visitor = visitors[name]
    assert visitor.login(name).status_code == 303
    return visitor


def only_entry(r: redis.Redis) -> str:
    [item] = open_escalations(EscalationQueue(r))
    return item.entry_id


def holders(r: redis.Redis) -> list[str | None]:
    return [e.holder for e in open_escalations(EscalationQueue(r))]


def test_every_page_needs_a_login(r: redis.Redis, visitors: dict[str, Visitor]) -> None:
    publish(r, refused_escalation("j1"))
    anon = visitors["ann"]
    for path in ("/escalations", f"/escalations/{only_entry(r)}", "/batches", "/batches/view"):
        response = anon.get(path)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login?next=")
    assert anon.get("/static/console.css").status_code == 200


def test_a_wrong_password_and_an_unknown_name_are_refused_alike(
    visitors: dict[str, Visitor],
) -> None:
    ann = visitors["ann"]
    wrong = ann.login("ann", "not-it")
    ann.get("/login")
    unknown = ann.post("/login", {"username": "mallory", "password": "x"})
    assert wrong.status_code == unknown.status_code == 401
    assert "Wrong name or password." in wrong.text and "Wrong name or password." in unknown.text
    assert ann.get("/escalations").status_code == 303
    assert ann.login("ann").status_code == 303
    assert ann.get("/escalations").status_code == 200


def test_login_only_ever_redirects_within_the_console(visitors: dict[str, Visitor]) -> None:
    ann = visitors["ann"]
    for target, expected in [
        ("//evil.example/x", "/escalations"),
        ("https://evil.example/", "/escalations"),
        ("/\\evil.example", "/escalations"),
        ("/batches", "/batches"),
    ]:
        ann.get("/login")
        response = ann.post(
            "/login", {"username": "ann", "password": PASSWORDS["ann"], "next": target}
        )
        assert response.headers["location"] == expected


def test_every_form_post_is_refused_without_its_csrf_token(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    publish(r, refused_escalation("j1"))
    entry = only_entry(r)
    ann = logged_in(visitors, "ann")
    posts = [
        route.path.replace("{entry_id}", entry)
        for route in _routes()
        if "POST" in (getattr(route, "methods", None) or ())
    ]
    assert {"/login", "/logout", f"/escalations/{entry}/claim"} <= set(posts)
    for path in posts:
        for token in ("", "forged-token"):
            response = ann.post(path, {"q1": "sales", "username": "ann"}, token=token)
            assert response.status_code in (403,), (path, response.status_code)
    # Nothing happened: still logged in, the escalation still waits, nothing was published.
    assert ann.get("/escalations").status_code == 200
    assert holders(r) == [None]
    assert [e.type for e in read_stream(r, REPLIES)] == ["escalation"]


def test_a_read_only_login_sees_everything_and_changes_nothing(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    publish(r, refused_escalation("j1"))
    entry = only_entry(r)
    rita = logged_in(visitors, "rita")
    listing = rita.get("/escalations")
    assert f"/escalations/{entry}/claim" not in listing.text
    assert f'href="/escalations/{entry}"' in listing.text
    detail = rita.get(f"/escalations/{entry}")
    assert detail.status_code == 200 and "/resolve" not in detail.text
    assert rita.post(f"/escalations/{entry}/claim", {}).status_code == 403
    assert rita.post(f"/escalations/{entry}/resolve", {"q1": "sales"}).status_code == 403
    assert holders(r) == [None]


def test_a_state_carrying_script_and_html_renders_as_text(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    message = refused_escalation(
        "<b>job</b>", batch="<i>batch</i>", state={"body": XSS, "html": "<h1>big</h1>"}
    )
    message.metadata["note"] = "<iframe src=//evil.example>"
    message.context["questions"]["team"]["criteria"]["<u>x</u>"] = "<script>alert(2)</script>"
    publish(r, message)
    ann = logged_in(visitors, "ann")
    pages = [ann.get("/escalations"), ann.get(f"/escalations/{only_entry(r)}")]
    for page in pages:
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'none'" in csp and "default-src 'none'" in csp
        for raw in ("<script", "<img src=x", "<h1>big", "<iframe", "<b>job", "<i>batch", "<u>x"):
            assert raw not in page.text
    detail = pages[1].text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in detail
    assert "&lt;iframe src=//evil.example&gt;" in detail
    assert "&lt;b&gt;job&lt;/b&gt;" in pages[0].text


def test_a_states_images_are_shown_and_nothing_else_is_turned_into_one(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    picture = io.BytesIO()
    Image.new("RGB", (8, 8), (0, 128, 0)).save(picture, format="PNG")
    good = "data:image/png;base64," + base64.b64encode(picture.getvalue()).decode()
    svg = "data:image/svg+xml;base64," + base64.b64encode(b"<svg onload=alert(1)/>").decode()
    publish(r, refused_escalation("j1", state={"photo": good, "drawing": svg}))
    page = logged_in(visitors, "ann").get(f"/escalations/{only_entry(r)}")
    images = re.findall(r'<img src="(data:[^"]+)"', page.text)
    assert images == [good]
    assert "img-src 'self' data:" in page.headers["content-security-policy"]


def test_no_key_secret_or_password_hash_is_ever_shown(
    r: redis.Redis, visitors: dict[str, Visitor], served: tuple[str, str]
) -> None:
    publish(r, refused_escalation("j1"))
    publish(r, menu_escalation("m1"))
    with Ledger(served[1]) as ledger:
        finished_job(ledger, "j1", "b1")
    ann = logged_in(visitors, "ann")
    entries = [e.entry_id for e in open_escalations(EscalationQueue(r))]
    pages = [
        ann.get("/login"),
        ann.get("/escalations"),
        *(ann.get(f"/escalations/{e}") for e in entries),
        ann.get("/batches"),
        ann.get("/batches/view", batch="b1"),
        ann.get("/no/such/page"),
        ann.get("/escalations/1-1"),
    ]
    hashes = json.loads(console_env(REDIS_DB, "x")["DECISIONS_CONSOLE_USERS"])
    secrets = [CANARY_KEY, *PASSWORDS.values()]
    secrets += [u["password_hash"] for u in hashes.values()]
    for page in pages:
        for secret in secrets:
            assert secret not in page.text and secret not in str(page.headers)
    assert [p.status_code for p in pages[-2:]] == [404, 404]


def test_a_refused_answer_shows_its_problem_by_the_field_and_a_good_one_is_published(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    publish(r, refused_escalation("j1"))
    entry = only_entry(r)
    ann = logged_in(visitors, "ann")
    opened = ann.follow(ann.post(f"/escalations/{entry}/claim", {}))
    assert 'action="/escalations/' + entry + '/resolve"' in opened.text
    assert holders(r) == ["ann"]

    refused = ann.post(f"/escalations/{entry}/resolve", {"q1": "marketing", "q2": "1"})
    assert refused.status_code == 422
    team = _fieldset(refused.text, "q1")
    assert "invalid" in team and "one of billing, sales" in team
    assert "one of" not in _fieldset(refused.text, "q2")
    # What the reviewer chose is still chosen.
    assert re.search(r'name="q2" value="1" checked', refused.text)
    assert [e.type for e in read_stream(r, REPLIES)] == ["escalation"]

    done = ann.post(f"/escalations/{entry}/resolve", {"q1": "sales", "q2": "2"})
    assert done.headers["location"] == "/escalations"
    [resolution] = [
        json.loads(e.message) for e in read_stream(r, REPLIES) if e.type == "resolution"
    ]
    assert resolution["reviewer"] == "ann" and resolution["job_id"] == "j1"
    assert resolution["answer"] == {"urgent": True, "team": "sales", "mood": 2}
    assert open_escalations(EscalationQueue(r)) == []
    assert "resolved j1" in ann.get("/escalations").text


def test_two_reviewers_never_hold_the_same_escalation(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    publish(r, refused_escalation("j1"))
    entry = only_entry(r)
    ann, bob = logged_in(visitors, "ann"), logged_in(visitors, "bob")
    ann.post(f"/escalations/{entry}/claim", {})
    seen = bob.follow(bob.post(f"/escalations/{entry}/claim", {}))
    assert "Held by <strong>ann</strong>" in seen.text and "/resolve" not in seen.text
    tried = bob.post(f"/escalations/{entry}/resolve", {"q1": "sales"})
    assert tried.status_code == 303
    assert holders(r) == ["ann"]
    assert [e.type for e in read_stream(r, REPLIES)] == ["escalation"]
    # Released, it is bob's to take.
    assert ann.post(f"/escalations/{entry}/release", {}).headers["location"] == "/escalations"
    assert holders(r) == [None]
    bob.post(f"/escalations/{entry}/claim", {})
    assert holders(r) == ["bob"]


def test_a_menu_escalation_shows_the_menu_and_the_reply_and_is_answered_by_its_options(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    assert menu_checker() is not None, "the console must pass the menu engine's checker"
    publish(r, menu_escalation("m1"))
    entry = only_entry(r)
    ann = logged_in(visitors, "ann")
    page = ann.follow(ann.post(f"/escalations/{entry}/claim", {}))
    assert "- plan: Produce a plan" in page.text
    assert "I think we should &lt;b&gt;plan&lt;/b&gt; something" in page.text
    assert 'name="call" value="done"' in page.text and 'name="call" value="plan"' in page.text
    assert '<option value="&#34;high&#34;">high</option>' in page.text
    good = {"call": "plan", "m1.f0": "Ship", "m1.f1": '"high"', "m1.f2": "3"}

    # Wrong payload values are refused by the menu engine, each next to its input.
    refused = ann.post(
        f"/escalations/{entry}/resolve", {**good, "m1.f1": '"urgent"', "m1.f2": "2.5"}
    )
    assert refused.status_code == 422
    assert _error_after(refused.text, 'name="m1.f1"') and _error_after(refused.text, 'name="m1.f2"')
    assert not _error_after(refused.text, 'name="m1.f0"')
    unknown = ann.post(f"/escalations/{entry}/resolve", {"call": "explode"})
    assert unknown.status_code == 422 and "explode" in unknown.text
    assert [e.type for e in read_stream(r, REPLIES)] == ["escalation"]

    answered = ann.post(f"/escalations/{entry}/resolve", good)
    assert answered.status_code == 303
    [published] = [json.loads(e.message) for e in read_stream(r, REPLIES) if e.type == "resolution"]
    assert published["job_id"] == "m1" and published["reviewer"] == "ann"
    assert published["answer"]["value"] == {
        "decision": "plan",
        "title": "Ship",
        "priority": "high",
        "steps": 3,
    }


def test_the_batches_pages_show_the_ledger(
    r: redis.Redis, visitors: dict[str, Visitor], served: tuple[str, str]
) -> None:
    with Ledger(served[1]) as ledger:
        for i in range(3):
            finished_job(ledger, f"batch-page-{i}", "<b>bp</b>")
        finished_job(ledger, "batch-page-lost", "<b>bp</b>", status="unknown")
    rita = logged_in(visitors, "rita")
    listing = rita.get("/batches")
    assert "/batches/view?batch=%3Cb%3Ebp%3C/b%3E" in listing.text
    assert "<b>bp</b>" not in listing.text and "no estimate" in listing.text
    page = rita.get("/batches/view", batch="<b>bp</b>")
    assert page.status_code == 200 and "<svg" in page.text and "<b>bp" not in page.text
    assert "batch-page-lost" in page.text  # an unknown call, and among the slowest
    assert "no estimate" in page.text
    assert "No budget" in page.text
    with Ledger(served[1]) as ledger:
        ledger.set_budget("<b>bp</b>", 2.5)
    budgeted = rita.get("/batches/view", batch="<b>bp</b>").text
    card = budgeted.split('id="budget"', 1)[1].split("</section>", 1)[0]
    # The batch booked its calls before the budget: they count against it from the start.
    assert "$2.50" in card and "spent before the budget" in card and "left" in card
    assert "<b>bp" not in card
    assert rita.get("/batches/view", batch="nope").status_code == 404


def _error_after(html: str, input_marker: str) -> bool:
    """Whether an error paragraph follows the input before the next input's label."""
    after = html.split(input_marker, 1)[1]
    return '<p class="error"' in after.split('<label class="field">', 1)[0]


def _fieldset(html: str, name: str) -> str:
    found = re.search(rf'<fieldset class="[^"]*" id="{name}">.*?</fieldset>', html, re.S)
    assert found, name
    return found.group(0)


def test_the_state_comes_before_the_form_and_a_call_not_sent_cost_nothing(
    r: redis.Redis, visitors: dict[str, Visitor]
) -> None:
    from shared.replies import Receipt
    from shared.verdicts import escalation
    from tests.console.support import decide_job

    unsent = Receipt(step="decide", provider="parallel", status="not_sent", error_code="too_big")
    message = escalation(
        decide_job("j-unsent", state={"ticket": "printer on fire"}),
        "decision_interrupted",
        "test",
        [unsent],
        {},
    )
    publish(r, message)
    page = logged_in(visitors, "ann").get(f"/escalations/{only_entry(r)}").text
    assert page.index("<h2>State</h2>") < page.index("<h2>Questions</h2>")
    row = page[page.index("<h2>Receipts</h2>") :]
    row = row[row.index("not_sent") : row.index("</tr>", row.index("not_sent"))]
    assert "$0.00" in row and "unknown" not in row
