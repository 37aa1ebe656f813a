"""``decisions trace JOB`` on calls whose stored JSON is damaged (written by hand, restored from
an older schema, a disk): the damaged part is shown as unreadable, one line naming the call and
the column, and the rest of the trace is printed; never a traceback, the exit code of a
normal trace. Through the real CLI, text and ``--json``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from tests.cli.support import decisions, traceback_in
from worker.ledger import Ledger

JOB = "trace-damaged-1"
DEEP = "[" * 5000 + "]" * 5000
#: step -> (receipt_json, outcome_json, the damaged column); each call is damaged one way.
DAMAGED: dict[str, tuple[str | None, str | None, str]] = {
    "turn.0": ("[]", '{"head": "fine"}', "receipt_json"),
    "turn.1": ("5", '{"head": "fine"}', "receipt_json"),
    "turn.2": ('{"latency_ms": "fast"}', '{"head": "fine"}', "receipt_json"),
    "turn.3": ('{"latency_ms": 12.5}', '{"reply": {"tool_calls": 5}}', "outcome_json"),
    "turn.4": ('{"latency_ms": 12.5}', DEEP, "outcome_json"),
    "turn.5": (DEEP, '{"head": "fine"}', "receipt_json"),
    "turn.6": ('{"latency_ms": 12.5}', '{"reply": {"text": {"a": [1]}}}', "outcome_json"),
    "turn.7": ('{"latency_ms": 12.5}', "not json{", "outcome_json"),
    "turn.8": ('{"packed": 5}', '{"head": "fine"}', "receipt_json"),
    "turn.9": ('{"packed": {"jobs": [1]}}', '{"head": "fine"}', "receipt_json"),
}  # fmt: skip
HEALTHY = "turn.10"


def damaged_job(ledger: Ledger) -> None:
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    ledger.open_job(job_id=JOB, kind="menu", batch="b1", reply_to="r", fingerprint=JOB,
                    deadline=deadline, job_json="{}")  # fmt: skip
    rows = {**DAMAGED, HEALTHY: ('{"latency_ms": 7.25}', '{"head": "HEALTHYANSWER"}', "")}
    for step, (receipt, outcome, _) in rows.items():
        ledger.claim(job_id=JOB, step=step, provider="faux", model="faux-chat-1",
                     request_sha256=None, lease_expires=deadline)  # fmt: skip
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE calls SET status = 'answered', finished_at = claimed_at, "
                    "receipt_json = :r, outcome_json = :o, "
                    "pack_id = CASE WHEN :r LIKE '%packed%' THEN 'pack-1' ELSE NULL END "
                    "WHERE job_id = :j AND step = :s"
                ),
                {"r": receipt, "o": outcome, "j": JOB, "s": step},
            )


def test_a_damaged_call_is_named_and_the_rest_of_the_trace_shown(tmp_path: Path) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        damaged_job(ledger)
    text = decisions("trace", JOB, cwd=tmp_path, ledger_url=ledger_url)
    assert text.code == 0, text.output
    assert traceback_in(text.output) is None, traceback_in(text.output)
    assert "unexpected error" not in text.output
    lines = text.stdout.splitlines()
    for step, (_, _, column) in DAMAGED.items():
        named = [line for line in lines if f"{column} of {step} " in line]
        assert len(named) == 1 and "unreadable" in named[0], (step, text.stdout)
    assert "HEALTHYANSWER" in text.stdout and "7.2 ms" in text.stdout
    assert sum("unreadable" in line for line in lines) == len(DAMAGED), text.stdout
    # What could be read of a damaged call is still shown: its answer, its own timing.
    assert text.stdout.count("fine") >= 6

    as_json = decisions("trace", JOB, "--json", cwd=tmp_path, ledger_url=ledger_url)
    assert as_json.code == 0, as_json.output
    assert traceback_in(as_json.output) is None, traceback_in(as_json.output)
    nodes = {node["step"]: node for node in json.loads(as_json.stdout)["calls"]}
    for step, (_, _, column) in DAMAGED.items():
        assert [u["column"] for u in nodes[step]["unreadable"]] == [column], nodes[step]
    assert nodes[HEALTHY]["unreadable"] == [] and nodes[HEALTHY]["head"] == "HEALTHYANSWER"
