"""Rejected lines through the real ``decisions submit``: 1-based line numbers, the id their
rejected message carries in the stream, reasons a person understands; every job rejected is
a failure, not "every job has replied ()" (issue 17, item 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from shared import keys
from tests.cli.support import decisions, traceback_in
from tests.support.services import redis_database, redis_url

REDIS_DB = 9
REPLY_TO = "truth-lines:replies"
GOOD_QUESTIONS = {"q": {"type": "noul", "instructions": "Is it urgent?"}}

LINES = [
    b'\xef\xbb\xbf{"id": "bom", "state": "x"}',  # 1
    b'[{"id": "in-an-array"}]',  # 2
    b'"just a string"',  # 3
    b"{",  # 4: pretty-printed
    b'  "id": "spread"',  # 5
    b"}",  # 6
    json.dumps({"id": "no-type", "state": "x", "questions": {"q": {"instructions": "?"}}}).encode(),
    b"not json at all",  # 8
]


def test_rejected_lines_are_named_alike_on_the_terminal_and_in_the_stream(tmp_path: Path) -> None:
    batch = tmp_path / "bad.jsonl"
    batch.write_bytes(b"\n".join(LINES) + b"\n")
    with redis_database(REDIS_DB) as r:
        url = redis_url(REDIS_DB)
        done = decisions(
            "submit", str(batch), "--reply-to", REPLY_TO, "--wait", "--timeout", "5",
            cwd=tmp_path, redis_url=url, broker_url=url,
        )  # fmt: skip
        stream_ids = {
            fields[b"job_id"].decode()
            for _, fields in r.xrange(keys.reply_stream(REPLY_TO))
            if fields.get(b"type") == b"rejected"
        }
    assert traceback_in(done.output) is None
    assert done.code == 1, done.output
    assert "every job has replied" not in done.output
    assert "every job was rejected (8)" in done.stderr
    ids = dict(re.findall(r"rejected line (\d+):.*\[stream id ([^]]+)\]", done.stderr))
    for job_id, n in re.findall(r"rejected (\S+) \(line (\d+)\)", done.stderr):
        ids[n] = job_id
    assert sorted(ids, key=int) == [str(n) for n in range(1, 9)]
    assert set(ids.values()) == stream_ids
    reasons = dict(
        re.findall(r"rejected line (\d+): (.*?)(?: \[stream id [^]]+\])?$", done.stderr, re.M)
    )
    reasons.update(
        {n: why for _, n, why in re.findall(r"rejected (\S+) \(line (\d+)\): (.*)", done.stderr)}
    )
    assert "byte order mark" in reasons["1"]
    assert reasons["2"] == "a JSON array; put one job object per line"
    assert reasons["3"].startswith("a JSON string, not a job object")
    for n in ("4", "5", "6"):
        assert "spread over several lines" in reasons[n]
    assert ids["7"] == "no-type"
    assert "discriminator" not in reasons["7"] and '"type"' in reasons["7"]


def test_a_dry_run_names_rejected_lines_as_submit_does(tmp_path: Path) -> None:
    batch = tmp_path / "bad.jsonl"
    batch.write_bytes(b"\n".join(LINES) + b"\n")
    with redis_database(REDIS_DB):
        url = redis_url(REDIS_DB)
        done = decisions(
            "submit", str(batch), "--reply-to", REPLY_TO, "--dry-run",
            cwd=tmp_path, redis_url=url, broker_url=url,
        )  # fmt: skip
    assert traceback_in(done.output) is None
    assert "line-" not in done.output
    said = " ".join(done.stderr.split())
    assert "rejected line 1: (body): starts with a byte order mark" in said
    assert "rejected line 8: (body): not JSON" in said
    assert "rejected no-type (line 7): questions.q" in said


def test_lines_rejected_at_submit_are_counted_in_the_batchs_status(tmp_path: Path) -> None:
    """``ledger status --batch`` counts the lines ``submit`` refused (never queued, so never
    in the ledger) beside its jobs, the totals adding up; the same bad line submitted twice
    counts once (issue 17)."""
    bad = [
        {"id": "s-bad-1", "batch": "counted", "state": "x", "questions": {"q": {"type": "?"}}},
        {"id": "s-bad-2", "batch": "counted", "state": "", "questions": GOOD_QUESTIONS},
        {"id": "s-other", "batch": "elsewhere", "state": "", "questions": GOOD_QUESTIONS},
    ]
    batch = tmp_path / "bad.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in bad))
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with redis_database(REDIS_DB):
        url = redis_url(REDIS_DB)
        settings = {"redis_url": url, "broker_url": url, "ledger_url": ledger_url}
        assert decisions("migrate", cwd=tmp_path, **settings).code == 0
        for _ in range(2):
            done = decisions("submit", str(batch), "--reply-to", REPLY_TO, cwd=tmp_path, **settings)
            assert done.code == 0 and "rejected 3" in done.stdout, done.output
        shown = decisions(
            "ledger", "status", "--batch", "counted", "--json", cwd=tmp_path, **settings
        )
        table = decisions(
            "ledger", "status", "--batch", "counted", cwd=tmp_path, env={"COLUMNS": "80"},
            **settings,
        )  # fmt: skip
    assert shown.code == 0, shown.output
    body = json.loads(shown.stdout)
    assert (body["jobs_total"], body["rejected_at_submit"], body["lines_submitted"]) == (0, 2, 2)
    assert table.code == 0, table.output
    assert re.search(r"rejected at submit\s*│\s*2\b", table.stdout), table.stdout
    assert re.search(r"lines submitted\s*│\s*2\b", table.stdout), table.stdout


def test_run_names_a_bad_line_by_the_id_its_rejection_carries(tmp_path: Path) -> None:
    """``decisions run`` says which ``rejected.jsonl`` entry a line without an id became, as
    ``submit`` does for the stream; a comment line before it does not shift the count."""
    batch = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "fine", "state": "x", "questions": GOOD_QUESTIONS})
    batch.write_bytes(b"// a comment\n" + good.encode() + b"\n" + b"not json at all\n")
    done = decisions(
        "run", str(batch), "--out", str(tmp_path / "out"), cwd=tmp_path,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )  # fmt: skip
    assert traceback_in(done.output) is None
    assert done.code == 0, done.output
    said = re.search(r"line (\d+): not JSON.*\[stream id ([^]]+)\]", done.stderr)
    assert said is not None, done.stderr
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").open()]
    assert said[1] == "3"
    assert [r["job_id"] for r in rejected] == [said[2]]


def submit(tmp_path: Path, batch: Path, reply_to: str, *more: str) -> Any:
    """``decisions submit`` of ``batch`` to ``reply_to`` on this file's Redis database."""
    url = redis_url(REDIS_DB)
    return decisions(
        "submit", str(batch), "--reply-to", reply_to, *more, cwd=tmp_path, redis_url=url,
        broker_url=url,
    )  # fmt: skip


def test_a_lone_surrogate_in_an_id_is_a_rejected_line_not_a_bug(tmp_path: Path) -> None:
    """``"a\\ud800b"`` is valid JSON text but no UTF-8: its rejection's digest raised
    UnicodeEncodeError, and submit ended "unexpected error ... a bug" with nothing queued
    (found by an attack). It is a rejected line naming ``id``; the lines around it go."""
    reply_to = "truth-lines:surrogate"
    batch = tmp_path / "batch.jsonl"
    good = {"batch": "b", "state": "s", "questions": GOOD_QUESTIONS}
    batch.write_text(
        json.dumps({"id": "first", **good}) + "\n"
        + '{"id":"a\\ud800b","batch":"b\\udc80","state":"s","questions":{"q":{"type":"noul"}}}\n'
        + json.dumps({"id": "third", **good}) + "\n"
    )  # fmt: skip
    with redis_database(REDIS_DB) as r:
        done = submit(tmp_path, batch, reply_to)
        queued = sorted(json.loads(member)[1] for member in r.hkeys(keys.INTAKE_JOBS))
        [(_, fields)] = r.xrange(keys.reply_stream(reply_to))
    assert traceback_in(done.output) is None
    assert "unexpected error" not in done.output, done.output
    assert done.code == 0, done.output
    assert "rejected 1" in done.stdout
    said = " ".join(done.stderr.split())
    assert "rejected line 2: id: holds a lone surrogate" in said
    assert "batch: holds a lone surrogate" in said
    assert queued == ["first", "third"]
    assert fields[b"type"] == b"rejected" and fields[b"job_id"].startswith(b"invalid-")


def test_a_rejected_id_like_a_line_key_is_reported_and_a_valid_job_is_not(tmp_path: Path) -> None:
    """Lines without an id were reported under made-up ``line-N`` keys among the job ids: a
    rejected job whose id was ``line-1`` was hidden by the next id-less line, and a queued
    job whose id was ``line-2`` was reported as rejected line 3 (found by an attack)."""
    reply_to = "truth-lines:line-keys"
    good = {"batch": "b", "state": "s", "questions": GOOD_QUESTIONS}
    lines = [
        {**good, "id": "line-1", "questions": {"q": {"type": "nope"}}},  # rejected
        {**good},  # rejected: no id
        {**good, "id": "line-2"},  # queued
        {**good, "questions": {"q": {"type": "noul"}}},  # rejected: no id, no instructions
    ]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with redis_database(REDIS_DB) as r:
        done = submit(tmp_path, batch, reply_to)
        rejected = [
            fields[b"job_id"].decode()
            for _, fields in r.xrange(keys.reply_stream(reply_to))
            if fields.get(b"type") == b"rejected"
        ]
    assert traceback_in(done.output) is None
    assert done.code == 0, done.output
    assert "submitted 1 job(s)" in done.stdout and "rejected 3" in done.stdout, done.stdout
    said = done.stderr
    assert "rejected line-1 (line 1): questions.q" in said, said
    assert "rejected line 3" not in said and "line-2" not in said, said
    named = dict(re.findall(r"rejected line (\d+):.*\[stream id ([^]]+)\]", said))
    assert sorted(named) == ["2", "4"]
    assert sorted(rejected) == sorted(["line-1", *named.values()]), (rejected, said)


def test_a_dry_run_keeps_a_job_whose_id_is_like_a_line_key_apart(tmp_path: Path) -> None:
    """The dry run's estimate mixed made-up ``line-N`` keys with job ids too: a rejected job
    ``line-1`` was hidden by the id-less line at position 1, in its listing and its JSON."""
    good = {"batch": "b", "state": "s", "questions": GOOD_QUESTIONS}
    lines = [
        {**good, "id": "line-1", "questions": {"q": {"type": "nope"}}},  # rejected
        {**good},  # rejected: no id
        {**good, "id": "line-2"},  # valid
    ]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = submit(tmp_path, batch, "r", "--dry-run")
    assert traceback_in(done.output) is None and done.code == 0, done.output
    assert "1 job(s) valid, 2 rejected" in " ".join(done.stdout.split()), done.stdout
    said = " ".join(done.stderr.split())
    assert "rejected line-1 (line 1): questions.q" in said, said
    assert "rejected line 2: id" in said, said
    as_json = submit(tmp_path, batch, "r", "--dry-run", "--json")
    report = json.loads(as_json.stdout)
    assert list(report["rejected"]) == ["line-1"] and list(report["rejected_lines"]) == ["2"]
