"""Packing across jobs, planned: which jobs may share a request, how a message's jobs split
into requests within the provider's limits, and how the client groups them into messages."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shared.canonical import canonical_bytes
from shared.client import Client
from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.job_wire import wire_text
from shared.jobs import DecideJob
from shared.judgments import PARALLEL_PACK_LIMITS, SYSTEM_ONE_PACK_LIMITS
from shared.message_size import MESSAGE_OVERHEAD_BYTES, MessageChunks, job_cost
from shared.packs import pack_key, pack_requests, packed_questions
from shared.settings import Settings
from shared.tokens import estimate_tokens

STATE = {"policy": "Refunds within 30 days; shipping is free over 50 EUR."}


def decide(job_id: str, questions: int = 3, **fields: Any) -> DecideJob:
    raw: dict[str, Any] = {
        "id": job_id,
        "batch": "b",
        "reply_to": "r",
        "state": STATE,
        "pack": True,
        "questions": {
            f"q{k}": {"type": "noul", "instructions": f"Does clause {job_id}.{k} apply?"}
            for k in range(questions)
        },
    }
    raw.update(fields)
    job = parse_job(raw)
    assert isinstance(job, DecideJob)
    return job


def wire(job: DecideJob) -> dict[str, dict[str, Any]]:
    return {qid: q.wire() for qid, q in job.questions.items()}


def test_jobs_share_a_key_only_with_the_same_batch_state_provider_and_model() -> None:
    key = pack_key(decide("a"), "faux")
    assert key is not None
    assert pack_key(decide("b", questions=1), "faux") == key  # questions differ: still one key
    assert pack_key(decide("c", batch="other"), "faux") != key
    assert pack_key(decide("d", state="another state"), "faux") != key
    assert pack_key(decide("e", provider="parallel"), "faux") != key
    assert pack_key(decide("f", provider="faux"), "faux") == key  # the default, named
    assert pack_key(decide("g", model="faux-2"), "faux") != key


def test_unpacked_and_verified_jobs_have_no_key() -> None:
    assert pack_key(decide("a", pack=False), "faux") is None
    verified = decide("v", verify={"model": "faux-2"})
    assert pack_key(verified, "faux") is None


def test_packing_does_not_change_what_the_job_is() -> None:
    # Resubmitted without --pack it is the same job, and replays its stored outcome.
    assert job_fingerprint(decide("a")) == job_fingerprint(decide("a", pack=False))


def test_parallel_takes_whole_jobs_up_to_100_questions() -> None:
    jobs = [decide(f"j{i}") for i in range(100)]
    requests = pack_requests(STATE, [wire(j) for j in jobs], PARALLEL_PACK_LIMITS)
    # 33 jobs of 3 questions make 99; the 34th would make 102.
    assert [len(r) for r in requests] == [33, 33, 33, 1]
    assert [i for r in requests for i in r] == list(range(100))


def test_system_one_fills_requests_to_64k_tokens_without_splitting_a_job() -> None:
    big = "x" * 2_000
    jobs = [
        decide(f"j{i}", questions=4, state=STATE) for i in range(200)
    ]
    members = [
        {qid: {**q, "instructions": f"{q['instructions']} {big}"} for qid, q in wire(j).items()}
        for j in jobs
    ]
    requests = pack_requests(STATE, members, SYSTEM_ONE_PACK_LIMITS)
    assert len(requests) > 1
    for request in requests:
        body = {"questions": packed_questions([members[i] for i in request]), "state": STATE}
        assert estimate_tokens(len(canonical_bytes(body))) <= 64_000
    for request, following in itertools.pairwise(requests):
        grown = [*request, following[0]]
        body = {"questions": packed_questions([members[i] for i in grown]), "state": STATE}
        assert estimate_tokens(len(canonical_bytes(body))) > 64_000  # none could take more


def test_a_job_too_big_for_one_request_goes_alone() -> None:
    members = [wire(decide("a")), wire(decide("big", questions=100)), wire(decide("c"))]
    assert pack_requests(STATE, members, PARALLEL_PACK_LIMITS) == [[0], [1], [2]]


@given(st.lists(st.integers(min_value=1, max_value=120), min_size=1, max_size=60))
def test_every_job_is_packed_once_in_order_and_no_two_requests_could_merge(
    sizes: list[int],
) -> None:
    members = [
        {f"q{k}": {"type": "noul", "instructions": "?"} for k in range(size)} for size in sizes
    ]
    requests = pack_requests("s", members, PARALLEL_PACK_LIMITS)
    assert [i for r in requests for i in r] == list(range(len(sizes)))
    for request in requests:
        total = sum(sizes[i] for i in request)
        assert total <= 100 or len(request) == 1
    for first, second in itertools.pairwise(requests):
        # The next job did not fit (or one of them cannot share at all).
        assert (
            sum(sizes[i] for i in first) + sizes[second[0]] > 100
            or sizes[first[0]] > 100
            or sizes[second[0]] > 100
        )


def test_the_buffer_hands_out_full_messages_then_the_rest_in_order() -> None:
    buffer: MessageChunks[int] = MessageChunks(3, max_bytes=10**9)
    assert buffer.add("a", 1, 1) == []
    assert buffer.add("b", 2, 1) == []
    assert buffer.add("a", 3, 1) == []
    assert buffer.add("a", 4, 1) == [[1, 3, 4]]
    assert buffer.add("c", 5, 1) == []
    assert buffer.add("a", 6, 1) == []
    assert list(buffer.drain()) == [[2], [5], [6]]
    assert list(buffer.drain()) == []


def test_the_dry_run_counts_packed_requests(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None,
        ledger_url=f"sqlite:///{tmp_path / 'l.db'}",
        pack_chunk_size=100,
        redis_url="redis://127.0.0.1:1/0",  # never reached: the estimate is not stored
    )
    raws = [
        {**decide(f"j{i}", provider="parallel").model_dump(mode="json"), "pack": False}
        for i in range(250)
    ]
    client = Client(settings)
    unpacked = client.estimate(raws, store=False)
    packed = client.estimate(raws, store=False, pack=True)
    assert unpacked.total.requests == 250
    # Messages of 100, 100 and 50 jobs; 33 jobs (99 questions) a Parallel request.
    assert packed.total.requests == 2 * math.ceil(100 / 33) + math.ceil(50 / 33) == 10
    assert packed.total.jobs == 250
    parallel = packed.total.by_provider["parallel"]
    assert parallel.cost_usd == round(10 * settings.parallel_list_price_usd, 12)
    assert packed.batches["b"].requests == 10


def test_the_dry_run_splits_packed_messages_under_the_cap_as_the_client_does(
    tmp_path: Path,
) -> None:
    raws = [
        {**decide(f"j{i:03d}", provider="parallel").model_dump(mode="json"), "pack": False}
        for i in range(250)
    ]
    one = job_cost(wire_text(parse_job({**raws[0], "reply_to": "x"}), raws[0]))
    settings = Settings(
        _env_file=None,
        ledger_url=f"sqlite:///{tmp_path / 'l.db'}",
        pack_chunk_size=100,
        redis_url="redis://127.0.0.1:1/0",
        # Room for 40 such jobs a message (the settings' own floor allows it: small jobs).
        max_message_bytes=MESSAGE_OVERHEAD_BYTES + 40 * one + one // 2,
        max_job_bytes=20_000,
    )
    packed = Client(settings).estimate(raws, store=False, pack=True)
    # Messages of 40 jobs (six) and 10, not of 100: two Parallel requests (33 jobs each at
    # most) for each 40, one for the 10.
    assert packed.total.requests == 6 * 2 + 1
    assert packed.total.jobs == 250
