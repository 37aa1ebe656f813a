"""Keeping secrets out of text that leaves the process: settings' reprs, handler and tool
errors in replies, escalations, the ledger and the console, recorded provider responses.

Pure functions of their input, plus two small registries a process fills on purpose:
``mark_secret(value)`` (a value never to be shown, e.g. a credential a handler reads) and
``watch_key_env(name)`` (an environment variable holding a key, beside the providers' own
``PROVIDER_KEY_ENVS``). ``current_secrets()`` reads both, and the key variables' values, at
call time: keys are read when needed and never stored here.

What is removed from a text (``scrub_text``):

- every known secret value (a key variable's as it is and stripped, as it is sent),
  verbatim, case-folded, URL-encoded, JSON-escaped and base64-encoded (plain, URL-safe,
  unpadded, and of ``Bearer <value>``), and any base64 token that decodes to text holding
  one (``Basic`` credentials ``user:<value>``, however aligned);
- any twelve or more characters of a known secret standing together (a key cut short,
  ``key[1:]``, a truncated echo, a key escaped in parts: ``shared.secret_fragments``);
- the userinfo, query string and fragment of every URL (``https://host/path`` is kept);
- known key shapes: ``sk-…``, ``Bearer``/``Basic``/``Token`` credentials, ``api_key=…``,
  ``password='…'`` and their kin, GitHub, Slack and AWS key ids, JSON web tokens.

Hand-written over a library: the known scrubbers (detect-secrets, scrubadub) scan files or
PII and know nothing of our keys' encoded forms; this is a few regular expressions.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final
from urllib.parse import quote, quote_plus

from pydantic_core import PydanticSerializationError, to_jsonable_python

from shared.errors import HandlerOutputInvalid
from shared.secret_fragments import REDACTED, remove_fragments

__all__ = [
    "MASK",
    "PROVIDER_KEY_ENVS",
    "REDACTED",
    "current_secrets",
    "error_text",
    "json_output",
    "mark_secret",
    "mask_url",
    "mask_urls",
    "remove_secrets",
    "scrub_text",
    "secret_forms",
    "watch_key_env",
]

#: What a URL's password becomes in a repr.
MASK: Final = "***"
#: The providers' key variables (``shared.settings`` documents them).
PROVIDER_KEY_ENVS: Final = (
    "OPENROUTER_API_KEY",
    "PARALLEL_API_KEY",
    "TYPESAFE_API_KEY",
    "OPENAI_API_KEY",
)
#: Shorter values are removed verbatim only: a 3-letter "key" case-folded would eat words.
MIN_FUZZY_CHARS: Final = 6
#: Longest text scrubbed whole; the rest is cut first (the result is cut shorter anyway).
MAX_SCRUBBED_CHARS: Final = 65_536

_lock = threading.Lock()
_marked: set[str] = set()
_key_envs: set[str] = set(PROVIDER_KEY_ENVS)


def mark_secret(value: str) -> None:
    """Never show ``value`` (nor its encodings) in a scrubbed text of this process."""
    if value:
        with _lock:
            _marked.add(value)


def watch_key_env(name: str) -> None:
    """The value of variable ``name`` is a key (a host's ``key_env``): never show it."""
    if name:
        with _lock:
            _key_envs.add(name)


def current_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The marked secrets and the values of the key variables set now, each as it is and
    stripped: the transport sends a key stripped (a secret file's final line break is not
    part of it), and that is the form a host echoes back. A value of whitespace only is the
    transport's "unset", and no secret (it would eat a text's line breaks)."""
    env = os.environ if environ is None else environ
    with _lock:
        names, marked = sorted(_key_envs), set(_marked)
    values: set[str] = set()
    for value in [env.get(name) or "" for name in names] + sorted(marked):
        if value.strip():
            values |= {value, value.strip()}
    return tuple(sorted(values, key=len, reverse=True))


# --- URLs ---------------------------------------------------------------------------------

_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_URL_START = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>.*)$", re.S)
_SENSITIVE_NAME = re.compile(r"pass|pwd|secret|token|key|auth|sig|credential|session", re.I)
_QUERY_PAIR = re.compile(r"(?P<name>[^&;=#]+)=(?P<value>[^&;#]*)")


def _split(rest: str) -> tuple[str | None, str, str]:
    """(userinfo, host[:port], path?query#fragment) of what follows ``scheme://``.

    The userinfo ends at the last @ before any ? or #: a password with an unencoded / is
    still userinfo (masking too much in an odd URL beats showing a password).
    """
    at = rest.rfind("@", 0, _first(rest, "?#"))
    userinfo, after = (rest[:at], rest[at + 1 :]) if at != -1 else (None, rest)
    end = _first(after, "/?#")
    return userinfo, after[:end], after[end:]


def _first(text: str, stops: str) -> int:
    found = [i for i in (text.find(s) for s in stops) if i != -1]
    return min(found) if found else len(text)


def mask_url(url: str, *, keep_user: bool = False) -> str:
    """``url`` with its password (and sensitive query values) shown as ``***``: for reprs.

    ``redis://:pw@host:6379/0`` → ``redis://:***@host:6379/0``; a userinfo without a colon
    may be a token (``https://TOKEN@host``) and is masked whole, unless ``keep_user`` (a
    database's or broker's URL, ``postgresql://postgres@host``: a user name).
    """
    match = _URL_START.match(url)
    if match is None:
        return _mask_malformed(url)
    userinfo, host, tail = _split(match["rest"])
    authority = host
    if userinfo is not None:
        user = userinfo.split(":", 1)[0] if ":" in userinfo else None
        if user is not None:
            authority = f"{user}:{MASK}@{host}"
        else:
            authority = f"{userinfo if keep_user else MASK}@{host}"
    if "?" in tail:
        path, query = tail.split("?", 1)
        tail = f"{path}?" + _QUERY_PAIR.sub(_mask_pair, query)
    return f"{match['scheme']}{authority}{tail}"


def _mask_malformed(url: str) -> str:
    """A URL setting that does not parse (``redis:/:pw@host``, ``redis//:pw@host``): all
    between its scheme and the last @ masked, and its query's sensitive values. Found by an
    attack: such a value was printed whole, password and all, by the very error that said
    it was not a URL. A value without an @ holds no userinfo and is kept."""
    head, query = url.split("?", 1) if "?" in url else (url, None)
    at = head.rfind("@")
    if at != -1:
        scheme = _SCHEME_PREFIX.match(head)
        start = scheme.end() if scheme else 0
        head = f"{head[:start]}{MASK}{head[at:]}"
    return head if query is None else f"{head}?" + _QUERY_PAIR.sub(_mask_pair, query)


def mask_urls(text: str) -> str:
    """Every URL in ``text`` through ``mask_url``, its user name kept when its scheme is not
    HTTP's: for lines naming servers (``postgresql://postgres@host/db?password=***``).

    libpq and redis-py take a password in the query as well as in the userinfo; found by an
    attack, only the latter was hidden. Sentence punctuation after a URL stays outside it."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(_masked_in_text, text)


def _masked_in_text(match: re.Match[str]) -> str:
    url = match[0].rstrip(".,;:!")
    keep_user = not url.lower().startswith(("http://", "https://"))
    return mask_url(url, keep_user=keep_user) + match[0][len(url) :]


def _mask_pair(match: re.Match[str]) -> str:
    name = match["name"]
    return f"{name}={MASK}" if _SENSITIVE_NAME.search(name) else match[0]


#: A URL in running text: up to whitespace, a quote or a bracket that closes it.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`\]\)}]+")


def _bare_url(match: re.Match[str]) -> str:
    """A URL in an error as ``scheme://host/path``: no userinfo, query or fragment."""
    head = _URL_START.match(match[0])
    if head is None:
        return match[0]
    _userinfo, host, tail = _split(head["rest"])
    path = re.split(r"[?#]", tail, maxsplit=1)[0]
    return f"{head['scheme']}{host}{path}"


# --- secret values ------------------------------------------------------------------------


def _b64_variants(raw: bytes) -> set[str]:
    std = base64.b64encode(raw).decode("ascii")
    url = base64.urlsafe_b64encode(raw).decode("ascii")
    return {std, std.rstrip("="), url, url.rstrip("=")}


def secret_forms(value: str) -> tuple[str, ...]:
    """The forms of ``value`` a text may carry: itself; URL-encoded (``quote`` with and
    without ``/`` kept, ``quote_plus``); JSON-escaped inside a string, as encoders write it
    (``\\uXXXX`` or the character itself beyond ASCII, ``\\"`` and ``\\\\``); base64 of it
    and of ``Bearer <value>`` (padded or not, standard or URL-safe); and each of those with
    ``/`` written ``\\/`` (PHP's JSON, and others'). Longest first.

    Case is matched loosely by the caller (``%2f``, ``\\u00E9``). ``Basic`` credentials,
    ``base64("user:<value>")``, are found by decoding (``remove_secrets``), not listed here.
    At most about twenty forms a secret, built once a set of secrets (``_secrets_pattern``)
    and only on error and recording paths: a paid call's own path never scrubs.
    """
    if not value:
        return ()
    forms = {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    }
    if len(value) >= MIN_FUZZY_CHARS:
        raw = value.encode("utf-8")
        forms |= _b64_variants(raw) | _b64_variants(b"Bearer " + raw)
    forms |= {f.replace("/", "\\/") for f in forms if "/" in f}
    return tuple(sorted(forms, key=len, reverse=True))


@lru_cache(maxsize=64)
def _secrets_pattern(secrets: tuple[str, ...]) -> tuple[re.Pattern[str] | None, ...]:
    fuzzy = {f for s in secrets if len(s) >= MIN_FUZZY_CHARS for f in secret_forms(s)}
    exact = {f for s in secrets if len(s) < MIN_FUZZY_CHARS for f in secret_forms(s)}

    def alternation(forms: set[str], flags: int) -> re.Pattern[str] | None:
        if not forms:
            return None
        ordered = sorted(forms, key=len, reverse=True)
        return re.compile("|".join(re.escape(f) for f in ordered), flags)

    return alternation(fuzzy, re.IGNORECASE), alternation(exact, 0)


_B64_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{8,}={0,2}")


def _decodes_to_secret(token: str, needles: tuple[bytes, ...]) -> bool:
    body = token.rstrip("=")
    for candidate in (body, body[1:], body[2:], body[3:]):
        padded = candidate + "=" * (-len(candidate) % 4)
        altchars = b"-_" if ("-" in candidate or "_" in candidate) else None
        try:
            decoded = base64.b64decode(padded, altchars=altchars).lower()
        except (binascii.Error, ValueError):
            continue
        if any(needle in decoded for needle in needles):
            return True
    return False


def remove_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of each secret (``secret_forms``, case-folded, and base64
    tokens that decode to text holding one) replaced by ``REDACTED``; nothing else touched
    (a recorded body stays as it came)."""
    ordered = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
    if not ordered:
        return text
    needles = tuple(s.lower().encode("utf-8") for s in ordered if len(s) >= MIN_FUZZY_CHARS)
    if needles:
        # First whole base64 tokens of text holding a secret at any offset (Basic
        # "user:key", a JSON blob): a token goes whole, not with its encoded key cut out.
        text = _B64_TOKEN.sub(
            lambda m: REDACTED if _decodes_to_secret(m[0], needles) else m[0], text
        )
    for pattern in _secrets_pattern(ordered):
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
    return remove_fragments(text, ordered)


# --- known shapes -------------------------------------------------------------------------

_ASSIGNED = (
    r"api[_\-]?key|apikey|access[_\-]?token|refresh[_\-]?token|auth[_\-]?token|token|"
    r"secret|client[_\-]?secret|password|passwd|pwd|authorization|x-api-key|signature|sig"
)
_KNOWN_SHAPES: Final = (
    # name=value, name: value, name='value' (URL queries, reprs, headers, JSON-ish text)
    (
        re.compile(
            rf"(?P<name>[\"']?\b(?:{_ASSIGNED})\b[\"']?\s*[=:]\s*)"
            r"(?P<value>(?:(?:Bearer|Basic|Token|Digest)\s+)?"
            r"(?:\"[^\"]*\"|'[^']*'|[^\s&,;\)\]\}]+))",
            re.IGNORECASE,
        ),
        lambda m: f"{m['name']}{REDACTED}",
    ),
    (
        re.compile(r"\b(?P<scheme>Bearer)\s+[A-Za-z0-9._~+/=\-]{4,}", re.I),
        lambda m: f"{m['scheme']} {REDACTED}",
    ),
    # "Basic"/"Token" start ordinary sentences too ("Token expired", "Basic authentication"):
    # Basic credentials are base64 of "user:password"; a token has a digit or a symbol.
    (
        re.compile(r"\b(?P<scheme>Basic)\s+(?P<cred>[A-Za-z0-9+/]{4,}={0,2})", re.I),
        lambda m: f"{m['scheme']} {REDACTED}" if _is_basic(m["cred"]) else m[0],
    ),
    (
        re.compile(
            r"\b(?P<scheme>Token|Digest)\s+"
            r"(?=[A-Za-z0-9._~+/=\-]*[0-9._~+/=\-])[A-Za-z0-9._~+/=\-]{6,}",
            re.I,
        ),
        lambda m: f"{m['scheme']} {REDACTED}",
    ),
    (re.compile(r"\b[sr]k[-_][A-Za-z0-9][A-Za-z0-9_\-]{3,}"), lambda m: REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{16,}"), lambda m: REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{16,}"), lambda m: REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{8,}"), lambda m: REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), lambda m: REDACTED),
    (
        re.compile(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
        lambda m: REDACTED,
    ),
)


def _is_basic(credential: str) -> bool:
    try:
        decoded = base64.b64decode(credential + "=" * (-len(credential) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without ``secrets`` (in any of their forms), URL credentials and queries, and
    known key shapes. Pure: pass ``current_secrets()`` for this process's keys."""
    text = remove_secrets(text, secrets)
    text = _URL_IN_TEXT.sub(_bare_url, text)
    for pattern, replace in _KNOWN_SHAPES:
        text = pattern.sub(replace, text)
    return text


def error_text(exc: BaseException, limit: int, secrets: Iterable[str] | None = None) -> str:
    """``Type: message`` of a handler's or tool's exception, scrubbed, at most ``limit``
    characters. A message that cannot be made a string is left out (the type stays)."""
    known = current_secrets() if secrets is None else tuple(secrets)
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:
        return name[:limit]
    if len(message) > MAX_SCRUBBED_CHARS:
        # Cut well before the end, so a secret split by the cut cannot survive whole.
        longest = max((len(s) for s in known), default=0)
        message = message[: MAX_SCRUBBED_CHARS - longest]
    text = scrub_text(message, known).strip()
    return (f"{name}: {text}" if text else name)[:limit]


# --- handler output -----------------------------------------------------------------------


def json_output(value: Any) -> Any:
    """A handler's or tool's return value as plain, strict JSON, or ``HandlerOutputInvalid``
    naming its type only (its repr may hold anything: ``Weird(password='hunter2')``).

    Pydantic's encoder takes what has a JSON form (models, dataclasses, datetimes, sets);
    an object it does not know, NaN or an infinity is not JSON.
    """
    try:
        plain = to_jsonable_python(value)
        json.dumps(plain, allow_nan=False)
    except (PydanticSerializationError, TypeError, ValueError, RecursionError):
        raise HandlerOutputInvalid(_type_name(value)) from None
    return plain


def _type_name(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "float (NaN or infinity)"
    return type(value).__name__
