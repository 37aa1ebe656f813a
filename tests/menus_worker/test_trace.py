"""``decisions trace JOB_ID``: the job's calls as a tree, read from the ledger."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from shared.settings import get_settings
from tests.menus_worker.support import Harness, menu_job
from worker.cli import app
from worker.cli.trace import build_tree
from worker.testing.faux import FauxChatReply, FauxToolCall


@pytest.fixture
def traced(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.setenv("DECISIONS_LEDGER_URL", harness.settings.ledger_url)
    get_settings.cache_clear()
    yield harness
    get_settings.cache_clear()


async def test_a_work_turn_with_a_re_pick_reads_as_a_tree(traced: Harness) -> None:
    harness = traced
    call = FauxToolCall(name="t_lookup", arguments={"order_id": "A-3"})
    harness.reply("tr", "turn.0", FauxChatReply(tool_calls=[call]))
    harness.reply("tr", "turn.1", FauxChatReply(content="I think escalate."))
    harness.pick("tr", "pick.1", "refund", {"order_id": "A-3", "amount": 9})
    job = menu_job("tr", work={"tools": ["t_lookup"], "max_steps": 3})
    assert await harness.run(job) == "result"

    roots = build_tree(harness.ledger.calls("tr"))
    assert [(n.call.step, [c.call.step for c in n.children]) for n in roots] == [
        ("turn.0", ["tool.0"]),
        ("turn.1", []),
        ("pick.1", []),
        ("handler", []),
    ]
    result = CliRunner().invoke(app, ["trace", "tr"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert re.search(r"job tr\s+menu\s+batch menus-test\s+result", lines[0])
    text = result.output
    assert re.search(r"turn\.0\s+turn faux/faux-chat-1\s+answered\s+[\d.]+ ms\s+\$0\.0", text)
    assert re.search(r"tool\.0\s+tool t_lookup\s+answered .* no cost", text)
    assert "[tool calls: t_lookup]" in text
    assert re.search(r"pick\.1\s+re-pick faux/faux-chat-1\s+answered", text)
    assert "I think escalate." in text
    assert re.search(r"handler\s+handler t_refund\s+answered", text)
    assert '"refunded": "A-3"' in text
    # The tool sits under the turn that asked for it.
    turn0 = next(i for i, line in enumerate(lines) if "turn.0" in line)
    tool0 = next(i for i, line in enumerate(lines) if "tool.0" in line)
    assert tool0 > turn0 and lines[tool0].index("tool.0") > lines[turn0].index("turn.0")

    as_json = CliRunner().invoke(app, ["trace", "tr", "--json"])
    tree = json.loads(as_json.output)
    assert [c["kind"] for c in tree["calls"]] == ["turn", "turn", "re-pick", "handler"]
    assert tree["calls"][0]["children"][0]["step"] == "tool.0"


async def test_failures_and_unknown_jobs(traced: Harness) -> None:
    harness = traced
    options = [{"kind": "handler", "name": "pay", "handler": "t_explode"}]
    harness.pick("tf", "pick.0", "pay", {"reason": "r"})
    assert await harness.run(menu_job("tf", options=options)) == "escalation"
    result = CliRunner().invoke(app, ["trace", "tf"], env={"COLUMNS": "200"})
    assert "escalation: handler_failed" in result.output
    assert re.search(r"handler\s+handler t_explode\s+failed .* handler_error", result.output)
    assert "RuntimeError: payments system is down (r)" in result.output
    missing = CliRunner().invoke(app, ["trace", "nope"])
    assert missing.exit_code == 1
