"""The console in a real browser: headless Chromium against `decisions console` on a loopback
port, backed by the real Redis and a real ledger that a real `decisions worker` filled by
running a batch against `decisions faux serve` (refusals, low confidence, a lost request, an
unparseable menu, a state crafted to inject script). Every escalation is answered in the
browser; every page is screenshotted into the test's output directory."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from PIL import Image

from shared.client import Client
from shared.escalations import EscalationQueue
from shared.settings import Settings
from shared.streams import read_stream
from tests.console.browser import chromium
from tests.console.server import PASSWORDS, console_env, console_server
from tests.console.support import REDIS_DB, publish, sift_escalation
from tests.support.open_escalations import open_escalations
from tests.support.processes import faux_server, worker_process
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

BATCH = "e2e"
REPLIES = "console-e2e:replies"
XSS_BODY = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
QUESTIONS: dict[str, Any] = {
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "team": {
        "type": "choice",
        "instructions": "Which team handles it?",
        "criteria": {"billing": "Payments and refunds", "sales": "Quotes", "technical": None},
    },
    "mood": {
        "type": "score",
        "instructions": "How cross is the customer?",
        "criteria": ["calm", "annoyed", "angry"],
    },
}


def decide(job_id: str, state: Any, *, floor: float | None = None) -> dict[str, Any]:
    questions = json.loads(json.dumps(QUESTIONS))
    if floor is not None:
        questions["team"]["escalate_below"] = floor
    return {"id": job_id, "batch": BATCH, "state": state, "questions": questions, "timeout_s": 30}


MENU_JOB: dict[str, Any] = {
    "id": "e2e-menu",
    "kind": "menu",
    "batch": BATCH,
    "prompt": "Ticket: the mug arrived broken. Pick one way to go on.",
    "max_retries": 1,
    "options": [
        {"kind": "value", "name": "close", "value": {"status": "closed"}, "description": "Done"},
        {
            "kind": "schema",
            "name": "plan",
            "description": "Plan the follow-up",
            "schema": {
                "type": "object",
                "fields": [
                    {"name": "action", "type": "str", "options": ["email", "call", "ship"]},
                    {"name": "days", "type": "int", "description": "within how many days"},
                ],
            },
        },
    ],
    "timeout_s": 30,
}


def photo() -> str:
    """A small PNG as a data: URL, as a producer might put a picture in a state."""
    image = Image.new("RGB", (96, 64), (31, 78, 121))
    for x in range(0, 96, 12):
        for y in range(0, 64, 16):
            image.putpixel((x, y), (255, 200, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


JOBS = [
    decide("e2e-refused", {"body": "Where is my refund?", "customer": "Ana", "photo": photo()}),
    decide("e2e-low", {"body": "Can I get a quote for 40 seats?"}, floor=0.9999),
    decide("e2e-xss", {"body": XSS_BODY, "html": "<h1 id=injected>big</h1>"}, floor=0.9999),
    decide("e2e-lost", {"body": "The export times out."}),
    *(decide(f"e2e-ok-{i}", {"body": f"Thanks for ticket {i}!"}) for i in range(4)),
    MENU_JOB,
]
ESCALATED = {"e2e-refused", "e2e-low", "e2e-xss", "e2e-lost", "e2e-menu"}


@dataclass
class Fleet:
    url: str
    redis: redis.Redis
    shots: Path
    replies: dict[str, str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    logs = tmp_path_factory.mktemp("console-e2e")
    shots = tmp_path_factory.mktemp("console-screens")
    ledger_url = f"sqlite:///{logs / 'ledger.db'}"
    with redis_database(REDIS_DB) as r, faux_server(log=logs / "faux.log") as faux_url:
        _misbehave(faux_url)
        env = console_env(REDIS_DB, ledger_url, faux_url=faux_url, worker_concurrency="1")
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                broker_url=redis_url(REDIS_DB), redis_url=redis_url(REDIS_DB), ledger_url=ledger_url
            )
            client = Client(settings)
            report = client.submit_batch(JOBS, reply_to=REPLIES)
            replies = {
                reply.job_id: reply.type
                for reply in client.replies(REPLIES, job_ids=report.job_ids, timeout_s=120)
            }
        with console_server(env, logs / "console.log") as url:
            yield Fleet(url=url, redis=r, shots=shots, replies=replies)


def _misbehave(faux_url: str) -> None:
    """One refusal, one request lost after it was sent, and a menu the model never picks."""
    behaviour = {
        "overrides": {
            "e2e-refused/decide": {"mode": "refuse", "refuse_questions": ["team"]},
            "e2e-lost/decide": {"mode": "drop_after_read"},
        }
    }
    chatter = {"content": "I would rather <b>chat</b> about mugs than pick."}
    chat = {"by_call": {"e2e-menu/pick.0": chatter, "e2e-menu/pick.1": chatter}}
    httpx.put(f"{faux_url}/_faux/behaviour", json=behaviour, timeout=5).raise_for_status()
    httpx.put(f"{faux_url}/_faux/chat", json=chat, timeout=5).raise_for_status()


@pytest.fixture(scope="module")
def browser(fleet: Fleet) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


class Reviewer:
    """One browser context (its own cookies): a person at the console."""

    def __init__(self, browser: Any, fleet: Fleet, name: str) -> None:
        self.fleet = fleet
        self.name = name
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def close(self) -> None:
        self.context.close()

    def go(self, path: str) -> Any:
        response = self.page.goto(self.fleet.url + path)
        assert response is not None
        return response

    def log_in(self, password: str | None = None) -> None:
        self.go("/escalations")
        assert "/login" in self.page.url
        self.page.fill("input[name=username]", self.name)
        self.page.fill("input[name=password]", password or PASSWORDS[self.name])
        self.submit("Log in")

    def shot(self, name: str) -> Path:
        path = self.fleet.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def row(self, job_id: str) -> Any:
        return self.page.locator("table.list tbody tr", has_text=job_id)

    def open(self, job_id: str) -> None:
        self.go("/escalations")
        with self.page.expect_navigation():
            self.row(job_id).locator("button:has-text('Open'), button:has-text('Continue')").click()
        self.page.wait_for_selector("h1:has-text('job')")

    def submit(self, button: str) -> None:
        """Click a form's button and wait for the page it leads to."""
        with self.page.expect_navigation():
            self.page.click(f"button:has-text('{button}')")

    def publish(self) -> None:
        self.submit("Publish resolution")


@pytest.fixture
def ann(browser: Any, fleet: Fleet) -> Iterator[Reviewer]:
    reviewer = Reviewer(browser, fleet, "ann")
    reviewer.log_in()
    yield reviewer
    reviewer.close()


def resolutions(fleet: Fleet) -> dict[str, dict[str, Any]]:
    found = {}
    for entry in read_stream(fleet.redis, REPLIES):
        if entry.type == "resolution":
            found[entry.job_id] = json.loads(entry.message)
    return found


def holder_of(fleet: Fleet, job_id: str) -> str | None:
    for item in open_escalations(EscalationQueue(fleet.redis)):
        if item.message.job_id == job_id:
            return item.holder
    raise AssertionError(f"{job_id} is not open")


def test_the_batch_ran_with_every_kind_of_escalation(fleet: Fleet) -> None:
    assert {j for j, t in fleet.replies.items() if t == "escalation"} == ESCALATED
    found = open_escalations(EscalationQueue(fleet.redis))
    reasons = {e.message.job_id: e.message.reason for e in found}
    assert reasons == {
        "e2e-refused": "decision_refused",
        "e2e-low": "low_confidence",
        "e2e-xss": "low_confidence",
        "e2e-lost": "decision_interrupted",
        "e2e-menu": "menu_unparseable",
    }


def test_log_in_and_see_the_queue_oldest_first(browser: Any, fleet: Fleet) -> None:
    visitor = Reviewer(browser, fleet, "ann")
    try:
        visitor.go("/escalations")
        visitor.shot("01-login")
        visitor.page.fill("input[name=username]", "ann")
        visitor.page.fill("input[name=password]", "wrong")
        visitor.submit("Log in")
        assert visitor.page.locator(".error").inner_text() == "Wrong name or password."
        visitor.page.fill("input[name=username]", "ann")
        visitor.page.fill("input[name=password]", PASSWORDS["ann"])
        visitor.submit("Log in")
        assert visitor.page.url.endswith("/escalations")
        rows = visitor.page.locator("table.list tbody tr code").all_inner_texts()
        expected = [i.message.job_id for i in open_escalations(EscalationQueue(fleet.redis))]
        assert rows == expected and set(rows) == ESCALATED
        visitor.shot("02-escalations")
        visitor.page.select_option("select[name=reason]", "low_confidence")
        visitor.submit("Filter")
        filtered = visitor.page.locator("table.list tbody tr code").all_inner_texts()
        assert sorted(filtered) == ["e2e-low", "e2e-xss"]
    finally:
        visitor.close()


def test_claim_answer_and_see_the_resolution_on_the_reply_stream(
    ann: Reviewer, fleet: Fleet
) -> None:
    ann.open("e2e-refused")
    assert holder_of(fleet, "e2e-refused") == "ann"
    team = ann.page.locator("fieldset#q1")
    assert "needs your answer" in team.inner_text()
    assert "Payments and refunds" in team.inner_text()
    # The state's picture is shown (a data: URL the page's policy allows) and has loaded.
    picture = ann.page.locator(".images img")
    assert picture.count() == 1
    assert picture.evaluate("img => [img.complete, img.naturalWidth]") == [True, 96]
    assert "state.photo" in ann.page.locator(".images figcaption").inner_text()
    ann.shot("03-escalation-refused")

    # Tamper with the form in the browser: an option the question does not have.
    ann.page.eval_on_selector(
        "fieldset#q1 input[value='=billing']",
        "el => { el.value = 'marketing'; el.checked = true; }",
    )
    ann.publish()
    refused = ann.page.locator("fieldset#q1 .error").inner_text()
    assert "one of billing, sales, technical" in refused and "marketing" in refused
    assert "invalid" in (ann.page.locator("fieldset#q1").get_attribute("class") or "")
    ann.shot("04-escalation-refused-invalid")
    assert "e2e-refused" not in resolutions(fleet)

    ann.page.check("fieldset#q1 input[value='=sales']")
    ann.page.check("fieldset#q2 input[value='2']")
    ann.publish()
    assert ann.page.url.endswith("/escalations")
    assert "resolved e2e-refused" in ann.page.locator(".flash").inner_text()
    resolution = resolutions(fleet)["e2e-refused"]
    assert resolution["reviewer"] == "ann" and resolution["reason"] == "decision_refused"
    assert resolution["answer"]["team"] == "sales" and resolution["answer"]["mood"] == 2
    assert isinstance(resolution["answer"]["urgent"], bool)  # the machine's answer stands


def test_a_second_reviewer_cannot_claim_what_the_first_holds(
    browser: Any, ann: Reviewer, fleet: Fleet
) -> None:
    ann.open("e2e-low")
    bob = Reviewer(browser, fleet, "bob")
    try:
        bob.log_in()
        row = bob.row("e2e-low")
        assert "ann" in row.inner_text()
        assert row.locator("button").count() == 0  # no claim button: a link to look only
        with bob.page.expect_navigation():
            row.locator("a:has-text('View')").click()
        assert "Held by ann" in bob.page.locator(".held").inner_text()
        assert bob.page.locator("button:has-text('Publish resolution')").count() == 0
        bob.shot("05-held-by-another")
        # Even a hand-made claim, with bob's own valid CSRF token, does not take it.
        token = bob.page.locator("input[name=csrf_token]").first.get_attribute("value")
        entry = bob.page.url.rsplit("/", 1)[1]
        bob.page.request.post(
            f"{fleet.url}/escalations/{entry}/claim", form={"csrf_token": token or ""}
        )
        assert holder_of(fleet, "e2e-low") == "ann"
    finally:
        bob.close()
    # ann answers it: the question below its floor is required, the others may stand.
    ann.open("e2e-low")
    ann.page.check("fieldset#q1 input[value='=sales']")
    ann.publish()
    assert resolutions(fleet)["e2e-low"]["answer"]["team"] == "sales"


def test_a_state_crafted_to_inject_script_renders_inert(ann: Reviewer, fleet: Fleet) -> None:
    ann.open("e2e-xss")
    page = ann.page
    state = page.locator("pre.state").inner_text()
    assert XSS_BODY in json.loads(state)["body"]
    assert page.evaluate("() => window.__pwned") is None
    assert page.evaluate("() => document.scripts.length") == 0
    assert page.locator("#injected").count() == 0 and page.locator("img[src=x]").count() == 0
    assert ann.dialogs == []
    ann.shot("06-escalation-injected-state")
    page.check("fieldset#q1 input[value='=technical']")
    ann.publish()
    assert resolutions(fleet)["e2e-xss"]["answer"]["team"] == "technical"


def test_an_interrupted_call_needs_every_answer_and_release_returns_it(
    ann: Reviewer, fleet: Fleet
) -> None:
    ann.open("e2e-lost")
    assert ann.page.locator(".req").count() == 3
    ann.submit("Release to the queue")
    assert holder_of(fleet, "e2e-lost") is None
    ann.open("e2e-lost")
    ann.page.check("fieldset#q0 input[value=false]")
    ann.page.check("fieldset#q1 input[value='=technical']")
    ann.publish()
    assert len(ann.page.locator(".error").all()) == 1  # mood is missing, named by its field
    assert "a value is required" in ann.page.locator("fieldset#q2 .error").inner_text()
    ann.page.check("fieldset#q2 input[value='0']")
    ann.publish()
    assert resolutions(fleet)["e2e-lost"]["answer"] == {
        "urgent": False,
        "team": "technical",
        "mood": 0,
    }


def test_an_unparseable_menu_is_answered_from_its_options(ann: Reviewer, fleet: Fleet) -> None:
    ann.open("e2e-menu")
    page = ann.page
    assert "chat" in page.locator("pre.reply").inner_text()
    assert "plan" in page.locator("pre.menu").inner_text()
    ann.shot("07-escalation-menu")
    page.check("input[name=call][value=plan]")
    page.locator("fieldset.option", has_text="plan").locator("select").select_option(label="ship")
    page.locator("fieldset.option", has_text="plan").locator("input[type=number]").fill("2")
    # Tamper: an enum value the schema does not allow.
    page.eval_on_selector(
        "fieldset.option select option[label=ship], fieldset.option select option:nth-child(4)",
        "el => { el.value = JSON.stringify('teleport'); el.selected = true; }",
    )
    ann.publish()
    plan = page.locator("fieldset.option", has_text="plan")
    assert (
        "teleport"
        in plan.locator("label.field", has_text="action").locator("+ p.error").inner_text()
    )
    assert "e2e-menu" not in resolutions(fleet)
    ann.shot("08-escalation-menu-invalid")
    page.check("input[name=call][value=plan]")
    page.locator("fieldset.option", has_text="plan").locator("select").select_option(label="email")
    page.locator("fieldset.option", has_text="plan").locator("input[type=number]").fill("3")
    ann.publish()
    resolved = resolutions(fleet)["e2e-menu"]["answer"]
    assert resolved["value"] == {"decision": "plan", "action": "email", "days": 3}


def test_every_escalation_was_answered_from_the_console(ann: Reviewer, fleet: Fleet) -> None:
    assert set(resolutions(fleet)) == ESCALATED
    assert open_escalations(EscalationQueue(fleet.redis)) == []
    ann.go("/escalations")
    assert "Nothing is waiting" in ann.page.locator(".empty").inner_text()
    ann.shot("09-escalations-empty")


def test_the_batch_pages_show_progress_cost_and_the_unknown_call(
    browser: Any, fleet: Fleet
) -> None:
    rita = Reviewer(browser, fleet, "rita")
    try:
        rita.log_in()
        rita.go("/batches")
        row = rita.page.locator("table.list tbody tr", has_text=BATCH)
        cells = row.locator("td").all_inner_texts()
        assert cells[1:6] == ["9", "0", "4", "5", "0"]
        assert "no estimate" in cells[-1]
        rita.shot("10-batches")
        with rita.page.expect_navigation():
            row.locator("a").click()
        page = rita.page
        assert page.locator("svg.chart polyline").count() >= 3
        unknown = page.locator("section", has_text="Unknown calls")
        assert "e2e-lost" in unknown.inner_text()
        cost = page.locator("section", has_text="Cost so far").inner_text()
        assert "faux" in cost and "no estimate" in cost
        assert "decision refused" in page.locator("section", has_text="Outcomes").inner_text()
        rita.shot("11-batch")
    finally:
        rita.close()


def test_a_big_sift_is_answered_in_bulk_and_the_batch_page_shows_who_did_what(
    ann: Reviewer, fleet: Fleet
) -> None:
    publish(
        fleet.redis,
        sift_escalation("e2e-sift", 500, decided=100, batch="e2e-sift", reply_to=REPLIES),
    )
    ann.open("e2e-sift")
    page = ann.page
    assert page.locator("table.items tbody tr").count() == 100
    assert "page 1 of 5" in page.locator("nav.pager").first.inner_text()
    assert "ticket 7: <b>refund</b> please" in page.locator("tr#q7 td.item").inner_text()
    ann.shot("12-escalation-sift")
    page.check("input[name=bulk][value=keep-false]")
    page.check("tr#q51 input[value=true]")
    ann.publish()
    answer = resolutions(fleet)["e2e-sift"]["answer"]
    assert len(answer) == 500 and answer["item.51"] is True and answer["item.0"] is True
    assert sum(1 for v in answer.values() if v) == 51  # the machine's 50 yes, and item 51
    ann.go(f"/batches/view?batch={BATCH}")
    actions = ann.page.locator("section", has_text="Reviewers' actions").inner_text()
    for job_id in ("e2e-refused", "e2e-low", "e2e-lost", "e2e-menu"):
        assert job_id in actions
    assert "resolve" in actions and "release" in actions and "ann" in actions
    ann.shot("13-batch-audit")
