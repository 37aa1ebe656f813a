"""Entries and form posts no worker or browser would make, in a real console on a real Redis:
each is named (an unreadable entry on the list, a problem beside its field, one line saying
why a post was refused), never a 500, and nothing is published for it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared import keys
from shared.escalations import EscalationQueue
from shared.replies import EscalationMessage
from shared.streams import read_stream
from tests.console.server import Visitor, console_env, console_server
from tests.console.support import (
    REDIS_DB,
    REPLIES,
    menu_escalation,
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
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("console-hostile")
    ledger_url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    env = console_env(REDIS_DB, ledger_url)
    with redis_database(REDIS_DB), console_server(env, where / "console.log") as url:
        yield url


@pytest.fixture
def r(served: str) -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


@pytest.fixture
def ann(served: str, r: redis.Redis) -> Iterator[Visitor]:
    visitor = Visitor(served)
    assert visitor.login("ann").status_code == 303
    yield visitor
    visitor.close()


def claimed(r: redis.Redis, ann: Visitor, message: EscalationMessage) -> str:
    publish(r, message)
    [item] = open_escalations(EscalationQueue(r))
    assert ann.post(f"/escalations/{item.entry_id}/claim", {}).status_code == 303
    ann.get(f"/escalations/{item.entry_id}")
    return item.entry_id


def published(r: redis.Redis) -> list[str]:
    return [e.type for e in read_stream(r, REPLIES)]


def unreadable_named(listing: str, count: int, *entry_ids: str) -> bool:
    noun = "entry" if count == 1 else "entries"
    return f"{count} {noun} could not be read" in listing and all(
        f"<code>{e}</code>" in listing for e in entry_ids
    )


def with_context(job_id: str, **context: Any) -> EscalationMessage:
    message = json.loads(refused_escalation(job_id).to_json())
    return EscalationMessage.model_validate({**message, "context": {"state": 1, **context}})


def test_an_entry_nested_too_deep_to_read_is_listed_as_unreadable(
    r: redis.Redis, ann: Visitor
) -> None:
    publish(r, refused_escalation("good"))
    deep = r.xadd(keys.ESCALATION_STREAM, {"job_id": "x", "message": "[" * 100_000 + "]" * 100_000})
    listing = ann.get("/escalations")
    assert listing.status_code == 200
    assert unreadable_named(listing.text, 1, deep.decode()) and "good" in listing.text


def test_questions_that_are_not_objects_make_the_entry_unreadable_not_a_500(
    r: redis.Redis, ann: Visitor
) -> None:
    publish(r, refused_escalation("good"))
    publish(r, with_context("listed", questions=["x"]))
    publish(r, with_context("mapped", questions={"a": "x"}))
    bad = [e for e in _pending(r)][1:]
    listing = ann.get("/escalations")
    assert listing.status_code == 200
    assert unreadable_named(listing.text, 2, *bad) and "good" in listing.text
    for entry in bad:
        assert ann.get(f"/escalations/{entry}").status_code == 404


def test_a_page_number_in_other_digits_falls_back_to_the_first_page(
    r: redis.Redis, ann: Visitor
) -> None:
    entry = claimed(r, ann, sift_escalation("s1", PAGE_SIZE + 5))
    shown = ann.get(f"/escalations/{entry}", page="²")
    assert shown.status_code == 200 and "page 1 of 2" in shown.text
    # With problems the page is shown again, at the page the form names.
    refused = ann.post(f"/escalations/{entry}/resolve", {"bulk": "keep", "page": "²"})
    assert refused.status_code == 422 and "page 1 of 2" in refused.text
    assert published(r) == ["escalation"]


def test_a_number_too_long_or_json_too_deep_is_named_beside_its_field(
    r: redis.Redis, ann: Visitor
) -> None:
    entry = claimed(r, ann, menu_escalation("m1"))
    form = {"call": "plan", "m1.f0": "t", "m1.f1": '"low"', "m1.f2": "1" * 5000}
    too_long = ann.post(f"/escalations/{entry}/resolve", form)
    assert too_long.status_code == 422
    assert "not a number" in _after(too_long.text, 'name="m1.f2"')
    deep = ann.post(f"/escalations/{entry}/resolve", {"pick_json": "[" * 50_000 + "]" * 50_000})
    assert deep.status_code == 422 and "not JSON" in _after(deep.text, 'name="pick_json"')
    assert published(r) == ["escalation"]


def test_a_menu_of_hundreds_of_inputs_is_resolved_from_its_whole_form(
    r: redis.Redis, ann: Visitor
) -> None:
    fields = [{"name": f"f{j}", "type": "str"} for j in range(450)]
    options = [{"kind": "schema", "name": "plan", "schema": {"type": "object", "fields": fields}}]
    message = EscalationMessage(
        job_id="big-menu",
        kind="menu",
        reason="menu_unparseable",
        context={"menu": "m", "options": options},
        reply_to=REPLIES,
    )
    entry = claimed(r, ann, message)
    page = ann.get(f"/escalations/{entry}").text
    # What a browser posts: every input of the form, the empty ones too.
    form = {name: "v" for name in re.findall(r'name="(m0\.f\d+)"', page)}
    assert len(form) == 450
    done = ann.post(f"/escalations/{entry}/resolve", {**form, "call": "plan", "pick_json": ""})
    assert done.status_code == 303, done.text[:300]
    assert published(r) == ["escalation", "resolution"]


def test_a_post_of_more_fields_than_any_form_holds_is_refused_in_one_line(
    r: redis.Redis, ann: Visitor
) -> None:
    entry = claimed(r, ann, refused_escalation("j1"))
    body = "&".join(["x"] * 300_000)  # 600 KB: under the body's size limit
    refused = ann.http.post(
        f"/escalations/{entry}/resolve",
        content=f"csrf_token={ann.token}&{body}",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert refused.status_code == 400
    assert re.search(r"<p>[^<]*more than [\d,]+ fields[^<]*</p>", refused.text), refused.text
    assert published(r) == ["escalation"]


def test_a_reply_stream_that_is_not_a_stream_is_named_and_the_escalation_stays_open(
    r: redis.Redis, ann: Visitor
) -> None:
    entry = claimed(r, ann, refused_escalation("j1"))
    r.delete(keys.reply_stream(REPLIES))
    r.set(keys.reply_stream(REPLIES), "not a stream")
    tried = ann.post(f"/escalations/{entry}/resolve", {"q1": "billing"})
    assert tried.status_code == 303
    page = ann.follow(tried)
    assert "nothing was written, the escalation stays open" in page.text
    [item] = open_escalations(EscalationQueue(r))
    assert item.holder == "ann"


def test_an_entry_whose_reply_to_is_not_a_stream_name_is_unreadable(
    r: redis.Redis, ann: Visitor
) -> None:
    publish(r, refused_escalation("good"))
    fields = {"job_id": "br", "reply_to": "not a name!"}
    bad = r.xadd(keys.ESCALATION_STREAM, {**fields, "message": refused_escalation("br").to_json()})
    listing = ann.get("/escalations")
    assert unreadable_named(listing.text, 1, bad.decode())
    assert f"/escalations/{bad.decode()}/claim" not in listing.text
    assert ann.get(f"/escalations/{bad.decode()}").status_code == 404


def _pending(r: redis.Redis) -> list[str]:
    open_escalations(EscalationQueue(r))  # hands every new entry to the group
    pending = r.xpending_range(keys.ESCALATION_STREAM, keys.ESCALATION_GROUP, "-", "+", 100)
    return [p["message_id"].decode() for p in pending]


def _after(html: str, marker: str) -> str:
    """The page from ``marker`` to the next input's label."""
    return html.split(marker, 1)[1].split('<label class="field">', 1)[0]
