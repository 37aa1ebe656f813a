"""The console's batch figures are the CLI's: one batch with answers, escalations, rejected
jobs and a stored dry-run estimate, read by ``decisions ledger status --batch --json`` and by
the console's pages over HTTP (issue 17, item 7)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared import keys
from shared.estimate import Estimate, ProviderEstimate
from tests.console.server import Visitor, console_env, console_server
from tests.console.support import finished_job
from tests.support.processes import DECISIONS
from tests.support.services import redis_database
from worker.ledger import Ledger

REDIS_DB = 12
#: The elements that reach past the screen's right edge (named in a failure).
WIDE_ELEMENTS = """[...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > 361)
  .slice(0, 8)
  .map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""
BATCH = "truth-b"
#: The ids in a table that the page broke over several lines (an inline element broken at a
#: line end has one box per line).
BROKEN_IDS = """[...document.querySelectorAll('table.list code')]
  .filter(e => e.getClientRects().length > 1)
  .slice(0, 8)
  .map(e => e.textContent)"""


def rejected_job(ledger: Ledger, job_id: str, batch: str) -> None:
    ledger.open_job(
        job_id=job_id,
        kind="decide",
        batch=batch,
        reply_to="replies:truth",
        fingerprint=job_id,
        deadline=datetime.now(UTC) + timedelta(minutes=5),
        job_json="{}",
    )
    ledger.finish_job(job_id=job_id, message_type="rejected", reason=None, message_json="{}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    where = tmp_path_factory.mktemp("console-truth")
    ledger_url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        for i in range(4):
            finished_job(ledger, f"t-ok-{i}", BATCH)
        for i in range(2):
            finished_job(ledger, f"t-esc-{i}", BATCH, status="failed")
        for i in range(5):
            rejected_job(ledger, f"t-bad-{i}", BATCH)
    env = console_env(REDIS_DB, ledger_url)
    estimate = Estimate(
        batch=BATCH,
        jobs=11,
        requests=6,
        by_provider={"faux": ProviderEstimate("faux", "list_price", 6, 0, 0.0123, 0.1)},
    )
    with redis_database(REDIS_DB) as r, console_server(env, where / "console.log") as url:
        r.set(keys.batch_estimate(BATCH), estimate.to_json())
        reject_at_submit(env)
        yield url, env


#: Lines of the batch the producer's Client refuses before queueing (never in the ledger);
#: the last repeats the first, which counts once.
SUBMIT_REJECTS = [
    {"id": "t-sub-0", "batch": BATCH, "state": "x", "questions": {"q": {"type": "nope"}}},
    {"id": "t-sub-1", "batch": BATCH, "kind": "sift", "items": []},
    {"id": "t-sub-0", "batch": BATCH, "state": "x", "questions": {"q": {"type": "nope"}}},
]


def reject_at_submit(env: dict[str, str]) -> None:
    """Submit the rejected lines through the real Client, as ``decisions submit`` does."""
    from shared.client import Client
    from shared.settings import Settings

    url = env["DECISIONS_REDIS_URL"]
    settings = Settings(redis_url=url, broker_url=env["DECISIONS_BROKER_URL"])
    client = Client(settings)
    try:
        report = client.submit_batch(SUBMIT_REJECTS, reply_to="replies:truth")
    finally:
        client.close()
    assert report.job_ids == [] and len(report.rejected) == 2


def cli_status(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [DECISIONS, "ledger", "status", "--batch", BATCH, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def tiles(html: str) -> dict[str, str]:
    found = re.findall(r'<span class="big">([^<]+)</span>\s*([a-z ]+)', html)
    return {label.strip(): value.strip() for value, label in found}


def test_the_batch_page_shows_the_clis_figures(served: tuple[str, dict[str, str]]) -> None:
    url, env = served
    cli = cli_status(env)
    visitor = Visitor(url)
    try:
        assert visitor.login("rita").status_code == 303
        page = visitor.get("/batches/view", batch=BATCH)
        listing = visitor.get("/batches")
    finally:
        visitor.close()
    assert page.status_code == 200
    shown = tiles(page.text)
    by_type = cli["jobs_by_type"]
    assert isinstance(by_type, dict)
    assert shown["jobs"] == str(cli["jobs_total"]) == "11"
    assert shown["answered"] == str(by_type.get("result", 0)) == "4"
    assert shown["escalated"] == str(by_type.get("escalation", 0)) == "2"
    assert shown["rejected"] == str(by_type.get("rejected", 0)) == "5"
    assert shown["still running"] == str(cli["jobs_open"]) == "0"
    # Lines the Client refused at submit: never in the ledger, counted beside it, and the
    # totals add up (11 jobs in the ledger + 2 lines rejected at submit = 13 lines).
    assert shown["rejected at submit"] == str(cli["rejected_at_submit"]) == "2"
    assert shown["lines submitted"] == str(cli["lines_submitted"]) == "13"
    estimate = cli["estimate"]
    assert isinstance(estimate, dict)
    assert estimate["cost_known_usd"] == pytest.approx(0.0123)
    assert "no estimate" not in page.text
    assert "of $0.012300 estimated" in page.text
    # The batches list: the same counts and the same estimate.
    row = re.search(rf"<tr>\s*<td><a[^>]*>{BATCH}</a>.*?</tr>", listing.text, re.S)
    assert row is not None, listing.text
    cells = re.findall(r'<td class="num">([^<]*)</td>', row[0])
    assert cells[:6] == ["11", "0", "4", "2", "5", "2"]
    assert "$0.012300" in row[0]


@pytest.mark.integration
def test_every_page_fits_a_phone_360_px_wide(
    served: tuple[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No page scrolls sideways at 360 px, and the header's controls stay on the screen."""
    from tests.console.browser import chromium
    from tests.console.server import PASSWORDS
    from tests.console.support import publish, refused_escalation, sift_escalation

    url, _ = served
    shots = tmp_path_factory.mktemp("phone")
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation("t-phone-1", batch=BATCH, state={"body": "x" * 400}))
        publish(r, sift_escalation("t-phone-2", 12, batch=BATCH))
        entries = [entry_id for entry_id, _ in r.xrange(keys.ESCALATION_STREAM)]
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 360, "height": 740})
        page = context.new_page()
        page.goto(url + "/login")
        page.fill("input[name=username]", "ann")
        page.fill("input[name=password]", PASSWORDS["ann"])
        page.get_by_role("button", name="Log in").click()
        paths = ["/escalations", "/batches", f"/batches/view?batch={BATCH}"]
        paths += [f"/escalations/{entry.decode()}" for entry in entries]
        for i, path in enumerate(paths):
            page.goto(url + path)
            page.screenshot(path=str(shots / f"{i}.png"), full_page=True)
            width = page.evaluate("document.documentElement.scrollWidth")
            wide = page.evaluate(WIDE_ELEMENTS)
            assert width <= 360, f"{path} is {width} px wide at 360 px: {wide}"
            broken = page.evaluate(BROKEN_IDS)
            assert broken == [], f"{path}: ids broken over lines at 360 px: {broken}"
            for control in ("Escalations", "Batches", "Log out"):
                box = page.locator("header.top").get_by_text(control).bounding_box()
                assert box is not None, f"{path}: {control} is not shown"
                assert box["x"] >= 0 and box["x"] + box["width"] <= 360, f"{path}: {control}"
        context.close()
