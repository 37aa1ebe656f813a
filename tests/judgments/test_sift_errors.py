"""A big sift whose requests all fail the same way escalates naming that error once, with how
many requests and items it hit (issue 16: a 10,000-item sift's message repeated it 100 times)."""

from __future__ import annotations

import json
from pathlib import Path

from shared.judgments.step_errors import MAX_ERROR_CHARS, distinct_errors
from shared.replies import EscalationMessage, parse_reply
from tests.judgments.support import settings_for, sift_job
from worker.embedded import run_batch
from worker.testing.faux import FauxBehaviour, FauxServer

ITEMS = 10_000
REQUESTS = 100  # Parallel packs 100 items a request


def test_a_big_sift_failing_alike_names_its_error_once(tmp_path: Path, server: FauxServer) -> None:
    settings = settings_for(tmp_path, server.url)
    job = sift_job("big", [f"m{i}" for i in range(ITEMS)], provider="parallel")
    for k in range(REQUESTS):
        server.provider.override(f"big/sift.{k}", FauxBehaviour(mode="status", status_code=400))

    run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=300)

    lines = (tmp_path / "out" / "escalations.jsonl").read_text().splitlines()
    reply = parse_reply(json.loads(lines[0]))
    assert isinstance(reply, EscalationMessage) and reply.reason == "provider_error"
    assert reply.items is not None and {i.status for i in reply.items} == {"failed"}
    assert len(reply.receipts) == REQUESTS
    # The detail: the counts, then the one error with its reach; no step named 100 times.
    assert f"({REQUESTS} requests, {ITEMS} items)" in reply.detail, reply.detail
    assert reply.detail.count("sift.") == 0, reply.detail
    assert len(reply.detail) < 400, reply.detail
    assert lines[0].count("the provider refused the request") == 1


def test_distinct_errors_keeps_each_once_and_names_a_lone_step() -> None:
    long = "x" * (MAX_ERROR_CHARS * 3)
    text = distinct_errors(
        [
            ("sift.0", 100, "sift.0: the provider failed: rate_limited"),
            ("sift.1", 100, "sift.1: the provider failed: rate_limited"),
            ("sift.2", 30, "sift.2 was not sent"),
            ("sift.3", 1, long),
        ]
    )
    assert text.split("; ")[:2] == [
        "the provider failed: rate_limited (2 requests, 200 items)",
        "sift.2: was not sent (30 items)",
    ]
    assert len(text) < MAX_ERROR_CHARS + 200
    # The provider's ref_id differs per request; the receipts keep it, the detail groups by rest.
    assert (
        distinct_errors(
            [
                ("sift.0", 100, "sift.0: parallel: status 400: refused; ref_id ref_1"),
                ("sift.1", 100, "sift.1: parallel: status 400: refused; ref_id ref_2"),
            ]
        )
        == "parallel: status 400: refused (2 requests, 200 items)"
    )
