"""``decisions escalations list`` pages as the console does (``shared.escalation_listing``):
a page of ``PAGE_ROWS``, ``--after ID`` for the next, and a last line saying how to get it.
It read every open entry on each call (20,000 of them: seconds and megabytes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared import keys
from shared.escalation_listing import PAGE_ROWS
from shared.escalations import EscalationQueue
from shared.replies import ResultMessage
from tests.cli.support import decisions, traceback_in
from tests.console.support import publish, refused_escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database, redis_url

#: This file's own Redis database (emptied before and after each test).
REDIS_DB = 11
OPEN = PAGE_ROWS * 2 + 30


def listed_ids(stdout: str, entries: list[str]) -> list[str]:
    """The entries a table shows, in the order it shows them."""
    known = set(entries)
    return [cells[1].strip() for cells in (line.split("│") for line in stdout.splitlines())
            if len(cells) > 2 and cells[1].strip() in known]


def test_list_pages_through_the_open_escalations_with_after(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        for n in range(OPEN):
            publish(r, refused_escalation(f"job-{n:04d}", batch="b" if n % 2 else "a"))
        # One a reader cannot parse: skipped with a line, never a failed page.
        r.xadd(keys.ESCALATION_STREAM, {"message": "{not json"})
        entries = [item.entry_id for item in open_escalations(EscalationQueue(r))]
        url = redis_url(REDIS_DB)
        pages = []
        after: list[str] = []
        while len(pages) < 5:
            done = decisions("escalations", "list", *after, cwd=tmp_path, redis_url=url)
            assert done.code == 0, done.output
            assert traceback_in(done.output) is None
            pages.append(done)
            hint = [line for line in done.stdout.splitlines() if "--after" in line]
            if not hint:
                break
            after = ["--after", hint[-1].split("--after", 1)[1].split()[0]]
        batch = decisions(
            "escalations", "list", "--batch", "b", "--json", cwd=tmp_path, redis_url=url
        )
    assert len(entries) == OPEN
    shown = [listed_ids(page.stdout, entries) for page in pages]
    assert [len(rows) for rows in shown] == [PAGE_ROWS, PAGE_ROWS, OPEN - 2 * PAGE_ROWS]
    assert [entry for rows in shown for entry in rows] == entries  # each once, in order
    first = pages[0].stdout
    assert f"{PAGE_ROWS} of {OPEN + 1} open escalation(s)" in first
    last_line = first.strip().splitlines()[-1]
    assert f"decisions escalations list --after {entries[PAGE_ROWS - 1]}" in last_line
    assert "--after" not in pages[-1].stdout  # the end says nothing more
    assert "skipped escalation" in pages[-1].stderr
    assert "its message is not JSON" in pages[-1].stderr  # why, as decode_entry says it
    # --json: stdout stays one JSON array; how to go on is said on stderr, filter kept.
    rows = json.loads(batch.stdout)
    assert len(rows) == PAGE_ROWS and {row["batch"] for row in rows} == {"b"}
    assert "decisions escalations list --batch b --json --after " in batch.stderr


@pytest.mark.parametrize("after", ["x; rm", "99999999999999999999-0", "1-18446744073709551616"])
def test_after_an_id_of_another_shape_is_refused_in_one_line(tmp_path: Path, after: str) -> None:
    # Past 2**64 - 1 too: Redis's own "Invalid stream ID" was said (found by an attack).
    with redis_database(REDIS_DB):
        done = decisions(
            "escalations", "list", "--after", after, cwd=tmp_path, redis_url=redis_url(11)
        )
    assert done.code == 2, done.output
    assert traceback_in(done.output) is None
    assert "is not an escalation id" in done.stderr


def test_list_says_why_each_entry_cannot_be_read(tmp_path: Path) -> None:
    """Each unreadable entry on its own line, with why: what ``decode_entry`` says (the claim
    skips it for that) or what is wrong with its questions (no answer could be checked)."""
    good = refused_escalation("good")
    questions = good.model_copy(update={"job_id": "listed", "context": {"questions": ["x"]}})
    result = ResultMessage(job_id="res", answers={})
    bodies = {
        "its message is not JSON": {"message": "{not json"},
        "it has no message field": {"job_id": "none"},
        "it holds a result, not an escalation": {"message": result.to_json()},
        "is not a stream name": {"reply_to": "not a name!", "message": good.to_json()},
        "its questions are not an object": {"message": questions.to_json()},
    }
    with redis_database(REDIS_DB) as r:
        publish(r, good)
        ids = {why: r.xadd(keys.ESCALATION_STREAM, fields).decode()
               for why, fields in bodies.items()}
        done = decisions("escalations", "list", cwd=tmp_path, redis_url=redis_url(REDIS_DB))
    assert done.code == 0, done.output
    assert traceback_in(done.output) is None
    assert "good" in done.stdout
    lines = done.stderr.splitlines()
    for why, entry in ids.items():
        [line] = [line for line in lines if entry in line]
        assert why in line, (why, line)
