"""Packing questions into requests: as few as the limits allow, each within every limit, in
order; and the worker packs exactly as the shared estimate does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.canonical import canonical_bytes
from shared.errors import JobInvalid
from shared.estimate import FAUX_DEFAULT_MODEL
from shared.judgments import (
    PARALLEL_PACK_LIMITS,
    SYSTEM_ONE_PACK_LIMITS,
    PackLimits,
    pack,
    pack_limits_for,
)
from shared.prices import FAUX_PRICE_PER_MTOK_USD
from shared.settings import Settings
from tests.judgments.support import requests_for, system_one_capacity, wire_item
from worker.kinds.judgments import pack_limits
from worker.providers import ProviderRegistry, rendered_length
from worker.providers.systemone import FAUX_DEFAULT_MODEL as WORKER_FAUX_MODEL
from worker.testing.faux.catalog import DEFAULT_PRICE_PER_TOKEN_USD, find_model


def questions(n: int, size: int = 10) -> list[tuple[str, dict[str, Any]]]:
    return [(f"item.{i}", wire_item("Spam?", f"{i:05d}" + "x" * size)) for i in range(n)]


def body_tokens(state: Any, group: list[tuple[str, dict[str, Any]]]) -> int:
    return len(canonical_bytes({"questions": dict(group), "state": state})) // 4


@pytest.mark.parametrize("n", [1, 99, 100, 101, 250, 1000])
def test_parallel_takes_100_questions_a_request(n: int) -> None:
    groups = pack("s", questions(n), PARALLEL_PACK_LIMITS)
    assert len(groups) == requests_for(n, 100)
    assert [i for g in groups for i in g] == list(range(n))
    assert all(len(g) == 100 for g in groups[:-1])


def test_system_one_fills_each_request_to_64k_tokens() -> None:
    state = {"shop": "a small shop", "notes": "y" * 2000}
    qs = questions(700, size=1000)
    groups = pack(state, qs, SYSTEM_ONE_PACK_LIMITS)
    low = system_one_capacity(state, qs[0][1], ids=3)
    high = system_one_capacity(state, qs[0][1], ids=1)
    assert requests_for(700, low) == requests_for(700, high) == len(groups) == 3
    for k, group in enumerate(groups):
        chosen = [qs[i] for i in group]
        assert body_tokens(state, chosen) <= 64_000
        if k + 1 < len(groups):
            # Maximal: the next question would have broken the limit.
            assert body_tokens(state, [*chosen, qs[groups[k + 1][0]]]) > 64_000
            assert low <= len(group) <= high


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=30),
    max_questions=st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
    letter=st.sampled_from(["z", "é"]),
)
def test_every_request_is_within_every_limit_and_none_could_take_the_next(
    sizes: list[int], max_questions: int | None, letter: str
) -> None:
    limits = PackLimits(
        max_questions=max_questions,
        max_question_chars=45_000,
        max_context_tokens=12_000,
        max_request_tokens=30_000,
    )
    state = "the state"
    # "é" is two bytes: characters (Parallel's limit) and bytes (tokens) part ways.
    qs = [(f"item.{i}", wire_item("q?", letter * size)) for i, size in enumerate(sizes)]
    state_size = len(canonical_bytes(state))
    too_big = [
        i for i, (_, q) in enumerate(qs)
        if rendered_length(q) > 45_000 or (state_size + len(canonical_bytes(q))) // 4 > 12_000
    ]
    if too_big:
        with pytest.raises(JobInvalid) as info:
            pack(state, qs, limits, field="items")
        assert info.value.problems[0].field == f"items.{too_big[0]}"
        return
    groups = pack(state, qs, limits)
    assert [i for g in groups for i in g] == list(range(len(qs)))
    for k, group in enumerate(groups):
        chosen = [qs[i] for i in group]
        assert max_questions is None or len(chosen) <= max_questions
        assert body_tokens(state, chosen) <= 30_000
        if k + 1 < len(groups):
            grown = [*chosen, qs[groups[k + 1][0]]]
            assert (max_questions is not None and len(grown) > max_questions) or (
                body_tokens(state, grown) > 30_000
            )


def test_a_question_past_parallels_5000_characters_is_named() -> None:
    qs = questions(3)
    qs[1] = ("item.1", wire_item("Spam?", "x" * 5_000))
    with pytest.raises(JobInvalid) as info:
        pack("s", qs, PARALLEL_PACK_LIMITS, field="items")
    assert [p.field for p in info.value.problems] == ["items.1"]
    assert "5000" in info.value.problems[0].message


def test_a_state_too_large_for_any_question_is_refused_at_the_first() -> None:
    with pytest.raises(JobInvalid) as info:
        pack("s" * 130_000, questions(2), SYSTEM_ONE_PACK_LIMITS, field="items")
    assert info.value.problems[0].field == "items.0"


def test_the_worker_packs_every_provider_as_the_shared_estimate_does() -> None:
    registry = ProviderRegistry.from_settings(Settings(_env_file=None))
    for name in registry.names():
        assert pack_limits(registry.get(name)) == pack_limits_for(name), name
    parallel = registry.get("parallel").limits
    assert parallel.max_questions == PARALLEL_PACK_LIMITS.max_questions
    assert parallel.max_rendered_question_chars == PARALLEL_PACK_LIMITS.max_question_chars


def test_the_shared_faux_constants_are_the_faux_s_own() -> None:
    assert FAUX_DEFAULT_MODEL == WORKER_FAUX_MODEL
    model = find_model(FAUX_DEFAULT_MODEL)
    assert model is not None
    assert pytest.approx(model.prompt_price_per_token_usd * 1e6) == FAUX_PRICE_PER_MTOK_USD
    assert pytest.approx(DEFAULT_PRICE_PER_TOKEN_USD * 1e6) == FAUX_PRICE_PER_MTOK_USD
