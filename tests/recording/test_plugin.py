"""The plugin as a user's project meets it: pytest in a subprocess, on a test file of the
user's own, with no conftest and no ``-p``: the fixtures come through the ``pytest11``
entry point. One live run records (a faux stands in for OpenRouter), one offline run
replays, and a live run without a key is skipped naming the variable."""

from __future__ import annotations

import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support.processes import decisions_env
from worker.testing.faux import FauxServer

from .support import recordings

USER_TESTS = '''
import pytest

RECORDINGS = "recordings"


def ticket(job_id, question="Does this convey urgency?"):
    return {
        "id": job_id, "kind": "decide", "provider": "openrouter", "model": "typesafe/jev-1.14",
        "state": "Help! My payouts have been failing for 3 days.",
        "questions": {"is_urgent": {"type": "noul", "instructions": question}},
    }


@pytest.mark.decisions_live("openrouter")
@pytest.mark.decisions_replay(RECORDINGS)
def test_recorded_ticket(decisions_worker, faux_counts, reply_stream, decisions_live):
    replies = decisions_worker.submit([ticket("t-1")])
    assert replies["t-1"].type == "result", replies["t-1"]
    assert faux_counts.total == 1 and faux_counts.for_job("t-1") == 1
    assert [r.job_id for r in reply_stream.results()] == ["t-1"]
    print("decision_id", replies["t-1"].receipts[0].decision_id, "live", decisions_live)


@pytest.mark.decisions_replay(RECORDINGS)
def test_unrecorded_ticket(decisions_worker):
    replies = decisions_worker.submit([ticket("t-2", question="Is this urgent?")])
    assert replies["t-2"].type == "escalation"
    assert replies["t-2"].reason == "provider_error"
    assert "is not recorded" in replies["t-2"].detail


def test_faux_failure_modes(decisions_worker, faux_behaviour, faux_counts, faux_url):
    assert faux_url.startswith("http://127.0.0.1:")
    faux_behaviour(mode="status", status_code=503)
    replies = decisions_worker.submit([ticket("t-3")])
    assert replies["t-3"].reason == "decision_interrupted"
    assert faux_counts.total == 1
'''


def _pytest(
    project: Path, *args: str, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, ET.Element]]:
    report = project / f"report-{uuid.uuid4().hex[:8]}.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", f"--junitxml={report}",
         "test_tickets.py", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=240,
    )
    cases = {case.get("name", ""): case for case in ET.parse(report).getroot().iter("testcase")}
    return done, cases


def _said(case: ET.Element) -> str:
    """What pytest reported for a test: the messages and texts of its failure, error or skip."""
    return "\n".join(f"{child.get('message', '')}\n{child.text or ''}" for child in case)


def _outcome(case: ET.Element) -> str:
    for child in case:
        if child.tag in ("failure", "error", "skipped"):
            return child.tag
    return "passed"


def test_a_users_project_records_then_replays_and_fails_loudly_on_a_miss(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_tickets.py").write_text(USER_TESTS)
    base = decisions_env()
    for variable in ("OPENROUTER_API_KEY", "TYPESAFE_API_KEY", "PARALLEL_API_KEY"):
        base.pop(variable, None)

    # 1. Live, recording: a faux stands in for OpenRouter, reached with a "real" key.
    canary = f"sk-canary-{uuid.uuid4()}"
    with FauxServer() as openrouter:
        live = {
            **base,
            "OPENROUTER_API_KEY": canary,
            "DECISIONS_OPENROUTER_BASE_URL": f"{openrouter.url}/api",
            "DECISIONS_RECORD_DIR": str(project / "recordings"),
        }
        done, cases = _pytest(
            project, "--decisions-live", "-k", "test_recorded_ticket or test_faux_failure_modes",
            env=live,
        )
        assert openrouter.provider.total() == 1, done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert _outcome(cases["test_faux_failure_modes"]) == "passed"
    assert "live True" in done.stdout and "decisions: live" in done.stdout
    # Only the live test's answer: the faux's 503 of the other test is not a real response.
    [(digest, recording)] = recordings(project / "recordings").items()
    assert canary not in (project / "recordings" / f"{digest}.json").read_text()
    recorded_id = recording["response"]["body"]["id"]

    # 2. Offline, no key: the recorded ticket replays, the unrecorded one fails the run.
    done, cases = _pytest(project, env=base)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _outcome(cases["test_recorded_ticket"]) == "passed"
    assert f"decision_id {recorded_id} live False" in done.stdout, "the recorded answer"
    assert _outcome(cases["test_faux_failure_modes"]) == "passed"
    unrecorded = cases["test_unrecorded_ticket"]
    assert _outcome(unrecorded) == "error", "the call passed; the teardown fails it"
    said = _said(unrecorded)
    assert "the replay had no recording for 1 request(s)" in said
    assert f"the closest recorded request is {digest}" in said
    assert "which differs in questions (changed 'is_urgent')" in said

    # 3. Live without the key: skipped, naming the variable.
    done, cases = _pytest(
        project, "--decisions-live", "-k", "test_recorded_ticket", "-rs", env=base
    )
    assert done.returncode == 0, done.stdout + done.stderr
    case = cases["test_recorded_ticket"]
    assert _outcome(case) == "skipped"
    assert "OPENROUTER_API_KEY is not set" in _said(case)
