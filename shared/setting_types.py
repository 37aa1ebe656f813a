"""The value types of ``shared.settings``: how one setting's value is read and checked.

Masked URLs, hosts, per-provider limits, users, prices, log levels and lists of names: each
type carries its own checks, so ``Settings`` declares which settings there are and checks
only what spans several of them. A ``MaskedUrl`` is the full URL wherever a string is used
(a connection) and shows no password in its repr; ``MaskedRepr`` masks every URL-looking
string of a model's repr.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field
from pydantic_settings import NoDecode

from shared.scrub import mask_url

__all__ = [
    "LOG_LEVELS",
    "MAX_SECONDS",
    "BrokerUrl",
    "ChatHost",
    "ConsoleUser",
    "HttpUrl",
    "LogLevel",
    "MaskedRepr",
    "MaskedUrl",
    "NameList",
    "OptionalHttpUrl",
    "OptionalUrl",
    "ProviderLimit",
    "ProxyAddresses",
    "RedisUrl",
    "Seconds",
    "StorePrefixes",
    "SystemOneHost",
    "Url",
    "Usd",
    "WholeSeconds",
    "log_level",
    "name_list",
    "port_problem",
    "redis_database_problem",
    "redis_url_problem",
    "tls_option_problem",
]

#: The longest time any setting may give (ten years). Times become deadlines, leases and
#: TTLs (a datetime plus the setting, Redis milliseconds): ``inf`` or 1e15 s passed
#: validation and then broke every job with an OverflowError past year 9999.
MAX_SECONDS = 10 * 365 * 24 * 3600
#: A setting in seconds (``_s``): at most ``MAX_SECONDS``.
Seconds = Annotated[float, Field(le=MAX_SECONDS)]
WholeSeconds = Annotated[int, Field(le=MAX_SECONDS)]

#: A price or a ceiling in USD: finite, not negative (a negative price failed every job's
#: ledger write, NaN made every cost NaN).
Usd = Annotated[float, Field(ge=0, allow_inf_nan=False)]

#: The log levels Celery's ``--loglevel`` and ``logging`` both take.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(value: str) -> str:
    """``value`` as one of ``LOG_LEVELS`` (any case, spaces around); ValueError otherwise."""
    # Checked with the settings so that a wrong name is explained naming its variable, not
    # refused later by Celery's command line as a bare usage error.
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"{value!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    return level


def name_list(value: Any) -> Any:
    """A string as the list it writes, comma-separated or a JSON list; any other value as it
    is (the list's own check judges it)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _store_prefixes(value: list[str]) -> list[str]:
    from shared.images import store_prefix  # the one reading of an allowlisted prefix

    return [store_prefix(text) for text in value]


def _proxy_addresses(value: list[str]) -> list[str]:
    """Each an address or network (``10.0.0.0/8``), as uvicorn's ``forwarded_allow_ips`` reads
    them; ValueError naming the first that is not."""
    for text in value:
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(
                f"{text!r} is not an IP address or network (write 127.0.0.1, ::1 or 10.0.0.0/8)"
            ) from None
    return value


#: A log level's name, upper case: one of ``LOG_LEVELS``.
LogLevel = Annotated[str, AfterValidator(log_level)]
#: Names from one variable, comma-separated or a JSON list (``NoDecode``: pydantic-settings
#: would read the variable as JSON only).
NameList = Annotated[list[str], NoDecode, BeforeValidator(name_list)]
#: The addresses or networks of proxies, a ``NameList`` each an IP address or network (no
#: "*": trusting every client is what the setting exists to prevent).
ProxyAddresses = Annotated[
    list[str], NoDecode, AfterValidator(_proxy_addresses), BeforeValidator(name_list)
]
#: The URL prefixes of image stores, a ``NameList`` each read as ``shared.images`` reads one.
#: (The split is listed last so that it wraps the rest: an error about a prefix shows the
#: split list, not the variable's text.)
StorePrefixes = Annotated[
    list[str], NoDecode, AfterValidator(_store_prefixes), BeforeValidator(name_list)
]


class MaskedUrl(str):
    """A URL that is itself as a string and shows no password in its repr."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(mask_url(str(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (MaskedUrl, (str(self),))


def _masked_or_none(value: str | None) -> MaskedUrl | None:
    return None if value is None else MaskedUrl(value)


#: A URL field: validated as a string, kept as a ``MaskedUrl``.
Url = Annotated[str, AfterValidator(MaskedUrl)]
#: An optional one (the annotation stays ``str | None`` for the settings table).
OptionalUrl = Annotated[str | None, AfterValidator(_masked_or_none)]


#: The form of a Redis URL, as a fix names it.
REDIS_FORM = "redis://HOST:PORT/DB"


def redis_database_problem(url: str, *, broker: bool) -> str | None:
    """What is wrong with the database a Redis URL names, or None (a URL of another scheme, or
    no database: 0). Whether the server has that database only the server says.

    redis-py read a path that is not a number (``/x``, ``/1/2``) as database 0, or 12, in
    silence; Celery's transport failed on it, and on any ``?db=`` (it takes no such option),
    with an error that named no setting."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if broker and "db" in query:
        return (
            f"?db={query['db'][0]}: the broker's URL takes no such option; its database is the "
            f"path, {REDIS_FORM}"
        )
    for value in query.get("db", []):
        if not value.isdigit():
            return f"?db={value} is not a database number; write {REDIS_FORM} (0 to 15)"
    path = parts.path.strip("/")
    # Without a host (redis:/x) the path is no database: that URL is explained as it is used.
    if parts.scheme in ("redis", "rediss") and parts.netloc and path and not path.isdigit():
        return f"{path!r} is not a database number: the path is the database, {REDIS_FORM}"
    return None


def port_problem(url: str) -> str | None:
    """What is wrong with a URL's port, or None (a port from 1 to 65535, or none).

    Checked with the settings, the one place: the worker refused such a URL when it made
    its streams client, but status and submit passed it to redis-py and kombu, which raised
    a bare ValueError ("Port out of range 0-65535"), explained as a bug in decisions."""
    parts = urlsplit(url)
    port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    try:
        number = parts.port
    except ValueError:
        number = None
    if port and (number is None or not 1 <= number <= 65535):
        return f"port {port!r} is not a port number: write one from 1 to 65535 (HOST:PORT)"
    return None


def tls_option_problem(url: str) -> str | None:
    """A TLS option (``?ssl_cert_reqs=``, ``?ssl_ca_certs=``...) on a Redis URL that speaks no
    TLS (``redis://``, ``unix://``), or None.

    Found by an attack: README's ``?ssl_cert_reqs=none`` copied onto a ``redis://`` URL made
    redis-py raise a TypeError (its plain connection takes no ssl_* argument), explained as a
    bug in decisions; kombu took it as a request for TLS, and a submit hung in the handshake.
    Only ``rediss://`` asks for TLS, so the option is a mistake whichever was meant."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "unix"):
        return None
    for name in parse_qs(parts.query, keep_blank_values=True):
        if name.startswith("ssl"):
            return (
                f"?{name}= is a TLS option, and a {parts.scheme}:// URL speaks no TLS: write "
                f"rediss://HOST:PORT/DB?{name}=... for a server over TLS, or remove it"
            )
    return None


def redis_url_problem(url: str, *, broker: bool) -> str | None:
    """What the settings can tell is wrong with a Redis URL (the broker's, of any scheme,
    or the streams'): its port, its TLS options, then its database
    (``redis_database_problem``); None if nothing is."""
    return (
        port_problem(url)
        or tls_option_problem(url)
        or redis_database_problem(url, broker=broker)
    )


def _broker_url(url: str) -> str:
    problem = redis_url_problem(url, broker=True)
    if problem is not None:
        raise ValueError(problem)
    return url


def _streams_url(url: str) -> str:
    problem = redis_url_problem(url, broker=False)
    if problem is not None:
        raise ValueError(problem)
    return url


def _http_url(url: str) -> str:
    # httpx refuses a URL without http(s):// or a host only when a request is made, which
    # the providers book as a call of unknown outcome: every job escalated, the setting
    # never named.
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an HTTP URL: write https://HOST/PATH (or http://HOST:PORT)")
    return url


def _optional_http_url(url: str | None) -> str | None:
    return None if url is None else _http_url(url)


#: A base URL of a provider, a host or the faux: an http(s) URL with a host, as a ``Url``.
HttpUrl = Annotated[str, AfterValidator(_http_url), AfterValidator(MaskedUrl)]
#: An optional one (the annotation stays ``str | None`` for the settings table).
OptionalHttpUrl = Annotated[
    str | None, AfterValidator(_optional_http_url), AfterValidator(_masked_or_none)
]

#: The broker's URL and the streams' Redis URL: a ``Url`` whose port, TLS options and database
#: are checked with the settings, not when a connection is made (``redis_url_problem``).
BrokerUrl = Annotated[str, AfterValidator(_broker_url), AfterValidator(MaskedUrl)]
RedisUrl = Annotated[str, AfterValidator(_streams_url), AfterValidator(MaskedUrl)]


class MaskedRepr(BaseModel):
    """Every string that looks like a URL is masked in the repr, also one set without
    validation (``model_copy(update=...)``, a default)."""

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if isinstance(value, str) and "://" in value:
                value = MaskedUrl(value)
            yield name, value


class SystemOneHost(MaskedRepr):
    """A host of the System One contract, by base URL (``POST {base}/v1/systemone``)."""

    model_config = {"hide_input_in_errors": True}

    base_url: HttpUrl
    key_env: str
    default_model: str | None = None
    models: list[str] = Field(default_factory=list, description="models served; empty = any")
    #: USD per million input tokens, booked as an estimate when the host reports no cost.
    price_per_mtok_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    path: str = "/v1/systemone"
    request_id_header: str | None = None


class ChatHost(MaskedRepr):
    """An OpenAI-compatible chat-completions host for menus (``POST {base}{path}``): vLLM, a
    local server, any other by base URL. ``key_env`` unset: the host takes no key."""

    model_config = {"hide_input_in_errors": True}

    base_url: HttpUrl
    key_env: str | None = None
    default_model: str | None = None
    models: list[str] = Field(default_factory=list, description="models served; empty = any")
    path: str = "/v1/chat/completions"
    #: Ask for usage accounting in the body (OpenRouter's ``usage: {include: true}``).
    usage_include: bool = False
    #: The body field that bounds a reply's tokens (``DECISIONS_MENU_MAX_OUTPUT_TOKENS``):
    #: OpenAI's own API takes ``max_completion_tokens`` (its reasoning models refuse
    #: ``max_tokens``); vLLM and most others take ``max_tokens``.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"


class ProviderLimit(BaseModel):
    """One provider's fleet-wide limits, shared by every worker through Redis."""

    #: Requests in flight at once, over the whole fleet (unset: no limit).
    max_in_flight: int | None = Field(None, ge=1)
    #: Requests sent in any one-second window, over the whole fleet (unset: no limit).
    per_second: int | None = Field(None, ge=1)


class ConsoleUser(BaseModel):
    """A reviewer console login: an Argon2 hash (``decisions console hash-password``), a role."""

    password_hash: str
    #: ``reviewer`` claims and answers escalations; ``read_only`` only looks.
    role: Literal["reviewer", "read_only"] = "read_only"
