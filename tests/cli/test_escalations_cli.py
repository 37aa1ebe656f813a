"""``decisions escalations list|release`` through the real CLI at 80 columns: whole ids,
``--json``, and a release refused names who holds the entry (issue 17, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from shared.escalations import EscalationQueue
from tests.cli.support import decisions, traceback_in
from tests.console.support import menu_escalation, publish, refused_escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database, redis_url

REDIS_DB = 10
#: A job id longer than an 80-column table leaves its column.
LONG_JOB = "support-ticket-2026-11-30-customer-4471-order-99812-refund-request"


def test_list_at_80_columns_shows_whole_ids_and_json_lists_them(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation(LONG_JOB, batch="a-rather-long-batch-name-2026-11-30"))
        publish(r, refused_escalation("short-job"))
        entries = [item.entry_id for item in open_escalations(EscalationQueue(r))]
        url = redis_url(REDIS_DB)
        table = decisions("escalations", "list", cwd=tmp_path, env={"COLUMNS": "80"}, redis_url=url)
        listed = decisions("escalations", "list", "--json", cwd=tmp_path, redis_url=url)
    assert table.code == 0, table.output
    assert traceback_in(table.output) is None
    assert "…" not in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())
    for entry in entries:
        assert entry in table.stdout  # whole, on one line: copied into claim/resolve
    # The long job id is wrapped, never cut: its column's pieces, in order, are whole ids.
    body = [line.split("│") for line in table.stdout.splitlines() if line.startswith("│")]
    assert "".join(cells[2].strip() for cells in body) == LONG_JOB + "short-job"
    rows = json.loads(listed.stdout)
    assert [row["id"] for row in rows] == entries
    assert {row["job_id"] for row in rows} == {LONG_JOB, "short-job"}
    assert all(row["held_by"] is None for row in rows)


def _held_by_ann(r: redis.Redis, job_id: str) -> str:
    """The id of ``job_id``'s refused escalation, published and claimed by ann."""
    publish(r, refused_escalation(job_id))
    queue = EscalationQueue(r)
    entry = open_escalations(queue)[0].entry_id
    queue.claim_entry(entry, "ann")
    return entry


def test_release_by_someone_else_names_who_holds_the_entry(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        entry = _held_by_ann(r, "held-job")
        done = decisions("escalations", "release", entry, cwd=tmp_path, redis_url=redis_url(10))
    assert done.code == 1
    assert traceback_in(done.output) is None
    assert "held by ann" in done.stderr
    assert "--reviewer ann" in done.stderr


def test_claim_at_80_columns_shows_the_whole_state(tmp_path: Path) -> None:
    state = {"body": "the printer on the third floor is on fire again " * 4 + "ENDOFSTATE"}
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation("claimed-job", state=state))
        done = decisions(
            "escalations", "claim", "--reviewer", "ann",
            cwd=tmp_path, env={"COLUMNS": "80"}, redis_url=redis_url(REDIS_DB),
        )  # fmt: skip
    assert done.code == 0, done.output
    assert traceback_in(done.output) is None
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    assert "ENDOFSTATE" in done.stdout


#: A batch name that is broken Rich markup, and one that is a link.
BROKEN_MARKUP = "b[/]"
LINK = "[link=https://evil.example/login]official-batch[/link]"
#: An ESC starting an OSC sequence that retitles the terminal, ended by BEL.
ESCAPE_SEQUENCE = "\x1b]0;pwned\x07"


def test_list_prints_batches_as_text_never_as_markup(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation("broken-job", batch=BROKEN_MARKUP))
        publish(r, refused_escalation("link-job", batch=LINK))
        done = decisions(
            "escalations", "list",
            cwd=tmp_path, env={"COLUMNS": "300"}, redis_url=redis_url(REDIS_DB),
        )  # fmt: skip
    assert done.code == 0, done.output
    assert traceback_in(done.output) is None
    assert BROKEN_MARKUP in done.stdout
    assert LINK in done.stdout  # the brackets as the job wrote them: no link was made


def test_claim_shows_the_entry_it_took_and_names_control_characters(tmp_path: Path) -> None:
    message = menu_escalation("menu-job", batch=BROKEN_MARKUP)
    message.detail = f"[bold]no pick[/] {ESCAPE_SEQUENCE}"
    message.context["last_reply"] = f"[/] {ESCAPE_SEQUENCE} pay \u202e0001$"
    message.context["menu"] = f"[link=https://evil.example]{LINK}\r- done"
    with redis_database(REDIS_DB) as r:
        publish(r, message)
        entry = open_escalations(EscalationQueue(r))[0].entry_id
        done = decisions(
            "escalations", "claim", "--batch", BROKEN_MARKUP, "--reviewer", "ann",
            cwd=tmp_path, env={"COLUMNS": "300"}, redis_url=redis_url(REDIS_DB),
        )  # fmt: skip
    assert done.code == 0, done.output
    assert traceback_in(done.output) is None
    assert f"escalation {entry}" in done.stdout  # the reviewer sees what they now hold
    assert f"batch {BROKEN_MARKUP}" in done.stdout
    assert "[bold]no pick[/] <U+001B>]0;pwned<U+0007>" in done.stdout
    assert "[/] <U+001B>]0;pwned<U+0007> pay <U+202E>0001$" in done.stdout
    assert f"[link=https://evil.example]{LINK}<U+000D>- done" in done.stdout
    assert "\x1b" not in done.output and "\u202e" not in done.output


def test_an_invalid_answer_holding_markup_is_reported_not_a_crash(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        entry = _held_by_ann(r, "answered-job")
        done = decisions(
            "escalations", "resolve", entry, "--reviewer", "ann",
            "--answer", '{"team": "[/]", "[/]": 1}',
            cwd=tmp_path, redis_url=redis_url(REDIS_DB),
        )  # fmt: skip
    assert done.code == 2, done.output
    assert traceback_in(done.output) is None
    assert "[/]" in done.stderr  # the answer's own text, named as it was given
