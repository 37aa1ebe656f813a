"""Big and bad escalations in a real console on a real Redis: a 10,000-item sift is paged,
shown as a table and answered in bulk; an entry that does not parse is named, not a 500; every
claim, release and resolution is in the audit log the batch page shows."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
import redis

from shared import keys
from shared.escalation_listing import PAGE_ROWS, list_open
from shared.escalations import EscalationQueue
from shared.streams import read_stream
from tests.console.server import Visitor, console_env, console_server
from tests.console.support import (
    REDIS_DB,
    REPLIES,
    finished_job,
    publish,
    refused_escalation,
    sift_escalation,
)
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database
from worker.console.decide_form import PAGE_SIZE
from worker.ledger import Ledger

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    where = tmp_path_factory.mktemp("console-big")
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
def ann(served: tuple[str, str], r: redis.Redis) -> Iterator[Visitor]:
    visitor = Visitor(served[0])
    assert visitor.login("ann").status_code == 303
    yield visitor
    visitor.close()


def only_entry(r: redis.Redis) -> str:
    [item] = open_escalations(EscalationQueue(r))
    return item.entry_id


def _pending_ids(r: redis.Redis) -> list[str]:
    pending = r.xpending_range(keys.ESCALATION_STREAM, keys.ESCALATION_GROUP, "-", "+", 100)
    return [p["message_id"].decode() for p in pending]


def resolution(r: redis.Redis) -> dict[str, object]:
    [found] = [json.loads(e.message) for e in read_stream(r, REPLIES) if e.type == "resolution"]
    return found


def test_a_ten_thousand_item_sift_is_paged_and_answered_in_bulk(
    r: redis.Redis, ann: Visitor
) -> None:
    publish(r, sift_escalation("big", 10_000))
    entry = only_entry(r)
    started = time.monotonic()
    page = ann.follow(ann.post(f"/escalations/{entry}/claim", {}))
    took = time.monotonic() - started
    assert page.status_code == 200
    assert len(page.content) < 400_000, len(page.content)  # one page of items, not 10.7 MB
    # Generous for a shared machine; checking the answers question by question took minutes.
    assert took < 20, took
    assert "page 1 of 100" in page.text
    assert "Does it ask for a refund?" in page.text
    # A table of items, the item as text (escaped), not the question's raw JSON.
    assert '<table class="list items">' in page.text
    assert "ticket 7: &lt;b&gt;refund&lt;/b&gt; please" in page.text
    assert '"question":' not in page.text
    assert len(re.findall(r'<tr id="q\d+"', page.text)) == PAGE_SIZE
    third = ann.get(f"/escalations/{entry}", page="3")
    assert 'id="q200"' in third.text and 'id="q199"' not in third.text

    # Nothing chosen: refused, naming the items on this page and counting the others.
    refused = ann.post(f"/escalations/{entry}/resolve", {"page": "1", "bulk": "keep"})
    assert refused.status_code == 422
    assert "9900 question(s) on other pages need an answer" in refused.text
    assert re.search(r'<tr id="q0" class="invalid"', refused.text)

    # All items no, except two overrides on the page shown: one request of a page's fields.
    done = ann.post(
        f"/escalations/{entry}/resolve",
        {"page": "1", "bulk": "false", "q3": "true", "q42": "true"},
    )
    assert done.status_code == 303, done.text[:300]
    answer = resolution(r)["answer"]
    assert isinstance(answer, dict) and len(answer) == 10_000
    assert {k for k, v in answer.items() if v} == {"item.3", "item.42"}
    assert open_escalations(EscalationQueue(r)) == []
    assert "resolved big: 10000 answers (9998 false, 2 true)" in ann.get("/escalations").text


def test_keep_the_machines_answers_and_say_no_to_the_rest(r: redis.Redis, ann: Visitor) -> None:
    publish(r, sift_escalation("part", 250, decided=120))
    entry = only_entry(r)
    page = ann.follow(ann.post(f"/escalations/{entry}/claim", {}))
    assert "page 1 of 3" in page.text
    # The machine said yes to item 0 (even): kept. Item 130 was refused: no. Item 2: overridden.
    done = ann.post(f"/escalations/{entry}/resolve", {"bulk": "keep-false", "q2": "false"})
    assert done.status_code == 303, done.text[:300]
    answer = resolution(r)["answer"]
    assert isinstance(answer, dict)
    assert answer["item.0"] is True and answer["item.1"] is False and answer["item.2"] is False
    assert answer["item.4"] is True and answer["item.130"] is False
    assert sum(1 for v in answer.values() if v) == 59  # 60 even items decided, one overridden


def test_an_entry_that_does_not_parse_is_named_and_the_rest_still_listed(
    r: redis.Redis, ann: Visitor
) -> None:
    publish(r, refused_escalation("good-1"))
    bad = {
        "type": "escalation",
        "job_id": "from-the-future",
        "reason": "decision_refused",
        "a_field_a_newer_version_adds": 1,
    }
    bad_id = r.xadd(keys.ESCALATION_STREAM, {"job_id": "x", "message": json.dumps(bad)})
    not_json = r.xadd(keys.ESCALATION_STREAM, {"job_id": "y", "message": "{oops"})
    publish(r, refused_escalation("good-2"))
    listing = ann.get("/escalations")
    assert listing.status_code == 200
    assert "2 entries could not be read" in listing.text
    for entry_id in (bad_id, not_json):
        assert f"<code>{entry_id.decode()}</code>" in listing.text
    assert "good-1" in listing.text and "good-2" in listing.text
    assert ann.get(f"/escalations/{bad_id.decode()}").status_code == 404
    # A move still works (a queue that skips bad entries), or says why not: never a 500.
    good = next(e for e in _pending_ids(r) if e not in (bad_id.decode(), not_json.decode()))
    claimed = ann.post(f"/escalations/{good}/claim", {})
    assert claimed.status_code == 303
    page = ann.follow(claimed)
    assert page.status_code == 200
    assert "You hold this escalation" in page.text or "cannot be read" in page.text


def test_claims_releases_and_resolutions_are_audited_and_shown_on_the_batch_page(
    r: redis.Redis, ann: Visitor, served: tuple[str, str]
) -> None:
    with Ledger(served[1]) as ledger:
        finished_job(ledger, "audited", "b-audit", status="unknown")
    publish(r, refused_escalation("audited", batch="b-audit"))
    entry = only_entry(r)
    ann.post(f"/escalations/{entry}/claim", {})
    ann.post(f"/escalations/{entry}/release", {})
    ann.post(f"/escalations/{entry}/claim", {})
    assert ann.post(f"/escalations/{entry}/resolve", {"q1": "sales"}).status_code == 303
    logged = [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in r.xrange(keys.audit_log())
    ]
    assert [e["action"] for e in logged] == ["claim", "release", "claim", "resolve"]
    assert {e["reviewer"] for e in logged} == {"ann"}
    assert {e["job_id"] for e in logged} == {"audited"}
    assert json.loads(logged[-1]["answer"]) == {"urgent": True, "team": "sales", "mood": 1.2}
    page = ann.get("/batches/view", batch="b-audit")
    assert page.status_code == 200
    section = page.text.split("Reviewers' actions", 1)[1]
    assert section.count("<td>ann</td>") == 4
    assert "<td>resolve</td>" in section and "&#34;team&#34;: &#34;sales&#34;" in section


def test_the_answer_of_a_big_sift_is_audited_as_a_summary(r: redis.Redis, ann: Visitor) -> None:
    publish(r, sift_escalation("big-audit", 2_000, batch="b-big"))
    entry = only_entry(r)
    ann.post(f"/escalations/{entry}/claim", {})
    assert ann.post(f"/escalations/{entry}/resolve", {"bulk": "true"}).status_code == 303
    [(_, fields)] = r.xrange(keys.batch_audit_log("b-big"), "-", "+")[-1:]
    assert fields[b"answer"].decode().startswith("2000 answers: 2000 true (sha256 ")


def test_the_list_is_paged_and_every_open_escalation_is_on_exactly_one_page(
    r: redis.Redis, ann: Visitor
) -> None:
    # Found by an attack: the list read every open entry's body on every view (20,000 of
    # them: 4 to 8 s, 9.5 MB of HTML; four views at once, 1.9 GB).
    total = PAGE_ROWS * 2 + 30
    for i in range(total):
        publish(r, refused_escalation(f"many-{i:03d}", batch="odd" if i % 2 else "even"))
    queue = EscalationQueue(r)
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        listing = list_open(queue, after=after)
        pages += 1
        assert len(listing.items) <= PAGE_ROWS and listing.open_total == total
        seen += [item.message.job_id for item in listing.items]
        if listing.next_after is None:
            break
        after = listing.next_after
    assert pages == 3 and seen == [f"many-{i:03d}" for i in range(total)]
    # A filter pages through the same entries, each of its own once.
    odd: list[str] = []
    after = None
    while True:
        listing = list_open(queue, batch="odd", after=after, limit=40)
        odd += [item.message.job_id for item in listing.items]
        if listing.next_after is None:
            break
        after = listing.next_after
    assert odd == [f"many-{i:03d}" for i in range(1, total, 2)]
    # Over HTTP: a page of rows and the way to the next one.
    first = ann.get("/escalations")
    assert first.status_code == 200 and first.text.count("<code>many-") == PAGE_ROWS
    assert f">{total}<" in first.text  # the count is of every open one
    link = re.search(r'href="(/escalations\?[^"]*after=[^"]+)"', first.text)
    assert link is not None
    second = ann.get(link.group(1).replace("&amp;", "&"))
    assert second.status_code == 200 and "<code>many-100</code>" in second.text
    assert "<code>many-000</code>" not in second.text
    assert ann.get("/escalations?after=not-an-id").status_code == 200  # read as the start
