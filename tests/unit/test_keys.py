"""The keys module: reply streams in a namespace of their own, unambiguous keys from ids."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import keys
from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.rejection import rejection_for

# What the broker keeps in the same Redis database (kombu's Redis transport, Celery's queue).
BROKER_KEYS = ["decisions", "unacked", "unacked_index", "unacked_mutex", "_kombu.binding.decisions"]

ids = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


#: The keys module's functions that do not build a key of their own.
NOT_BUILDERS = {"reply_stream", "is_reply_name", "reply_to_problem"}


def internal_keys(part: str) -> list[str]:
    """Every key the product builds that is not a reply stream, from one id: every string
    constant and every builder of ``shared.keys`` (those added later included), and the
    broker's own keys."""
    built = list(BROKER_KEYS)
    for name in keys.__all__:
        value = getattr(keys, name)
        if isinstance(value, str) and name not in {"REPLY_PREFIX", "REPLY_NAME_PATTERN"}:
            built.append(value)
        elif callable(value) and name not in NOT_BUILDERS:
            params = inspect.signature(value).parameters.values()
            positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
            built.append(value(*[part] * len(positional)))
            if any(p.name == "marker" for p in params):
                built.append(value(*[part] * len(positional), marker=part))
    return built


def test_every_builder_is_seen() -> None:
    assert len(internal_keys("x")) >= len(BROKER_KEYS) + 12


@given(ids)
def test_no_internal_key_lies_in_the_reply_namespace(part: str) -> None:
    for key in internal_keys(part):
        assert not key.startswith(keys.REPLY_PREFIX), key


@pytest.mark.parametrize("name", ["decisions", "decisions:escalations", "unacked_index", "r1"])
def test_a_reply_stream_key_is_never_an_internal_one(name: str) -> None:
    key = keys.reply_stream(name)
    assert key == keys.REPLY_PREFIX + name
    assert key not in internal_keys(name)


@pytest.mark.parametrize("name", ["", " x", "a b", "../x", "x" * 201, "é", "a\nb", "*"])
def test_a_malformed_name_builds_no_key(name: str) -> None:
    with pytest.raises(ValueError, match="not a reply stream name"):
        keys.reply_stream(name)


@given(ids, ids, ids, ids)
def test_two_stream_job_pairs_never_share_a_marker(s1: str, j1: str, s2: str, j2: str) -> None:
    if (s1, j1) != (s2, j2):
        assert keys.published_marker(s1, j1) != keys.published_marker(s2, j2)
    assert keys.published_marker(s1, j1) != keys.published_marker(s2, j2, marker=j1)


def test_the_reported_collision_is_gone() -> None:
    assert keys.published_marker("tenantA", "x:7") != keys.published_marker("tenantA:x", "7")


@pytest.mark.parametrize("reply_to", ["decisions:rejected", "a b", "", "x" * 201, "-x"])
def test_a_job_whose_reply_to_leaves_the_namespace_is_rejected_naming_reply_to(
    reply_to: str,
) -> None:
    raw = {"id": "j", "kind": "decide", "reply_to": reply_to, "state": "s", "questions": {}}
    with pytest.raises(JobInvalid) as caught:
        parse_job(raw)
    assert "reply_to" in [p.field for p in caught.value.problems]
    # Its rejection goes to the product's rejected stream, not to the name it asked for.
    assert rejection_for(raw, caught.value.problems).stream == keys.REJECTED_STREAM


@pytest.mark.parametrize(
    "reply_to", ["decisions", "decisions:escalations", "unacked_index", "tenant:a/replies.v2"]
)
def test_a_name_like_an_internal_key_is_a_fine_reply_stream(reply_to: str) -> None:
    assert keys.reply_to_problem(reply_to) is None
    assert keys.reply_stream(reply_to).startswith(keys.REPLY_PREFIX)
