"""``decisions escalations list|release`` through the real CLI at 80 columns: whole ids,
``--json``, and a release refused names who holds the entry (issue 17, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from shared.escalations import EscalationQueue
from tests.cli.support import decisions, traceback_in
from tests.console.support import publish, refused_escalation
from tests.support.services import redis_database, redis_url

REDIS_DB = 10
#: A job id longer than an 80-column table leaves its column.
LONG_JOB = "support-ticket-2026-11-30-customer-4471-order-99812-refund-request"


def test_list_at_80_columns_shows_whole_ids_and_json_lists_them(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation(LONG_JOB, batch="a-rather-long-batch-name-2026-11-30"))
        publish(r, refused_escalation("short-job"))
        entries = [item.entry_id for item in EscalationQueue(r).open()]
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


def test_release_by_someone_else_names_who_holds_the_entry(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation("held-job"))
        queue = EscalationQueue(r)
        entry = queue.open()[0].entry_id
        queue.claim_entry(entry, "ann")
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
