"""A key cut short or escaped in parts is still scrubbed (``shared.secret_fragments``).

Before, only a secret's whole forms were removed: ``key[:-1]`` (one character off), a
provider echoing the first thirty characters of a key, or a key with one character
``\\u``-escaped went out nearly whole.
"""

from __future__ import annotations

import json

import pytest

from shared.scrub import REDACTED, current_secrets, error_text, scrub_text
from shared.secret_fragments import FRAGMENT_CHARS, remove_fragments

KEY = "pk-live-4fT9qLx2Zr8WmB7nVc3KdY6hJs1GpQ0e"


@pytest.mark.parametrize(
    "part",
    [
        KEY[:-1],
        KEY[1:],
        KEY[:30],
        KEY[-FRAGMENT_CHARS:],
        KEY[10 : 10 + FRAGMENT_CHARS],
        KEY[5:33].upper(),
    ],
    ids=["last-cut", "first-cut", "prefix", "suffix", "middle", "case-folded"],
)
def test_a_long_enough_part_of_a_key_goes(part: str) -> None:
    text = f"401 Unauthorized: invalid key '{part}' for this project"
    scrubbed = scrub_text(text, [KEY])
    assert part.lower() not in scrubbed.lower()
    assert scrubbed.startswith("401 Unauthorized: invalid key '")
    assert REDACTED in scrubbed


def test_a_key_escaped_in_parts_loses_every_long_part() -> None:
    # One character \\u-escaped: neither the whole key nor its JSON form matches.
    escaped = KEY[:15] + f"\\u{ord(KEY[15]):04x}" + KEY[16:]
    scrubbed = scrub_text(json.dumps({"error": f"bad key {escaped}"}), [KEY])
    assert KEY[:15] not in scrubbed and KEY[16:] not in scrubbed


def test_a_part_shorter_than_the_fragment_stays() -> None:
    # The last four characters of a key are how a dashboard names it: they say nothing.
    short = KEY[-(FRAGMENT_CHARS - 1) :]
    text = f"the key ending {short} was revoked"
    assert remove_fragments(text, (KEY,)) == text


def test_ordinary_text_sharing_a_window_with_a_key_stays() -> None:
    # "pk-live-" is eight characters of the key, and the start of every such key's name.
    text = "keys look like pk-live-0000000000000000; this one is not ours"
    assert scrub_text(text, [KEY]) == text


def test_two_parts_side_by_side_and_the_text_between_them() -> None:
    text = f"{KEY[:20]} and {KEY[20:]}"
    assert remove_fragments(text, (KEY,)) == f"{REDACTED} and {REDACTED}"


def test_a_handler_error_holding_a_cut_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    said = error_text(RuntimeError(f"auth failed for {KEY[2:]}"), 500)
    assert said == f"RuntimeError: auth failed for {REDACTED}"
    assert KEY[2:] not in scrub_text(f"echo: {KEY[2:]}", current_secrets())


def test_a_short_secret_has_no_fragments() -> None:
    # A secret shorter than a fragment is removed whole only: its parts are ordinary words.
    assert remove_fragments("hunter2 and hunter", ("hunter2xyz",)) == "hunter2 and hunter"
