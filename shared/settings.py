"""All of decision-worker's settings, read from ``DECISIONS_*`` variables (and ``.env``).

Provider API keys are the one exception: they are read by their own names
(``OPENROUTER_API_KEY``, ``PARALLEL_API_KEY``, ``TYPESAFE_API_KEY``, ``OPENAI_API_KEY``, or the
``key_env`` a host names) at the moment a request is made, and never stored here.

Every URL setting is a ``MaskedUrl`` (``shared.setting_types``, with the hosts' and users'
shapes): the full URL wherever a string is used (a connection),
its password masked in every repr, so neither ``repr(settings)`` nor a validation error
(inputs hidden) nor anything that prints a settings object shows one. A host's ``key_env``
is watched by ``shared.scrub``, so its key is scrubbed from handler errors like the
providers' own.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.message_size import message_cap_problem
from shared.scrub import watch_key_env
from shared.setting_types import (
    BrokerUrl,
    ChatHost,
    ConsoleUser,
    HttpUrl,
    MaskedRepr,
    OptionalHttpUrl,
    ProviderLimit,
    RedisUrl,
    Seconds,
    SystemOneHost,
    Url,
    WholeSeconds,
)

__all__ = [
    "LOG_LEVELS",
    "Settings",
    "get_settings",
]


#: The log levels Celery's ``--loglevel`` and ``logging`` both take.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: A price or a ceiling in USD: finite, not negative.
_Usd = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Settings(BaseSettings, MaskedRepr):
    model_config = SettingsConfigDict(
        env_prefix="DECISIONS_",
        env_file=".env",
        extra="ignore",
        env_nested_delimiter="__",
        # A validation error shows no input: it may be a URL with its password.
        hide_input_in_errors=True,
        # No setting means infinity or NaN: "inf" seconds or dollars passed, then overflowed.
        allow_inf_nan=False,
    )

    # --- where things live -------------------------------------------------------------
    broker_url: BrokerUrl = Field("redis://127.0.0.1:6379/0", description="Celery broker URL")
    redis_url: RedisUrl = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding reply and escalation streams"
    )
    ledger_url: Url = Field("sqlite:///./decisions.db", description="SQLAlchemy URL of the ledger")
    sqlite_busy_timeout_s: Seconds = Field(
        5.0, ge=0, description="SQLite busy timeout (several processes)"
    )
    ledger_group_commit: bool = Field(
        True, description="group the ledger writes of concurrent jobs into shared transactions"
    )

    # --- providers ---------------------------------------------------------------------
    default_provider: str = Field("faux", description="provider of a job that names none")
    default_model: str | None = Field(None, description="model of a job that names none")
    provider_timeout_s: Seconds = Field(30.0, gt=0, description="longest single provider request")
    max_transport_attempts: int = Field(
        3, ge=1, le=10, description="sends of a provably unsent request"
    )
    # Decision responses are kilobytes (a 10,000-item sift's answers about one MiB); 256
    # requests in flight at this cap are 4 GiB at worst, against unbounded without one.
    max_response_bytes: int = Field(
        16 * 2**20,
        gt=0,
        description="a provider's response body in bytes, decompressed: a longer one is not"
        " read, and the call is booked invalid_response (processed, never sent again)",
    )
    faux_url: OptionalHttpUrl = Field(
        None,
        description="base URL of a `decisions faux serve`, the fake provider (unset: no `faux`"
        " unless DECISIONS_FAUX_IN_PROCESS)",
    )
    # A worker never gets the fake provider by default: a production worker given a job
    # naming `faux` rejects it (field `provider`) instead of answering it with made-up data.
    faux_in_process: bool = Field(
        False,
        description="answer provider and runtime `faux` in this process when"
        " DECISIONS_FAUX_URL is unset (tests, demos; `decisions run` sets it)",
    )
    faux_latency_ms: float = Field(0.0, ge=0, description="latency of the in-process faux provider")
    openrouter_base_url: HttpUrl = "https://openrouter.ai/api"
    openrouter_default_model: str | None = None
    typesafe_base_url: HttpUrl = "https://api.typesafe.ai"
    typesafe_default_model: str = "jev-latest"
    # Prices: a negative one failed every job's ledger write, NaN made every cost NaN.
    typesafe_price_per_mtok_usd: float = Field(0.042, ge=0, allow_inf_nan=False)
    parallel_base_url: HttpUrl = "https://api.parallel.ai"
    parallel_list_price_usd: float = Field(
        0.001,
        ge=0,
        allow_inf_nan=False,
        validation_alias=AliasChoices(
            "DECISIONS_PARALLEL_LIST_PRICE_USD", "PARALLEL_LIST_PRICE_USD"
        ),
    )
    parallel_modes: list[str] = Field(
        default_factory=lambda: ["fast"],
        validation_alias=AliasChoices("DECISIONS_PARALLEL_MODES", "PARALLEL_MODES"),
    )
    openai_base_url: HttpUrl = "https://api.openai.com"
    openai_default_model: str = "gpt-6-luna"
    openai_price_per_mtok_usd: float = Field(0.10, ge=0, allow_inf_nan=False)
    systemone_hosts: dict[str, SystemOneHost] = Field(
        default_factory=dict, description="extra System One hosts, by provider name (JSON)"
    )
    image_stores: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="URL prefixes (https://host/path/) a job's image `ref` may point into, "
        "comma-separated or a JSON list; the worker fetches only from these (empty: a job "
        "with an image ref is rejected)",
    )
    image_fetch_timeout_s: float = Field(
        10.0, gt=0, le=120, description="longest fetch of one image ref from an image store"
    )

    # --- budgets (worker.ledger.budget_ops) ----------------------------------------------
    max_price_per_mtok_usd: dict[str, _Usd] = Field(
        default_factory=dict,
        description='most a provider may charge per million request tokens, by provider (JSON:'
        ' {"openrouter": 0.5}); a request\'s worst case is its bytes at that price (TypeSafe,'
        " OpenAI and priced hosts default to their price; Parallel is its list price a "
        "request). A provider with neither cannot run under a budget",
    )
    daily_ceiling_usd: dict[str, _Usd] = Field(
        default_factory=dict,
        description='fleet-wide spend a (UTC) day, by provider (JSON: {"parallel": 20}); a '
        "request whose worst case does not fit is not sent (budget_exhausted)",
    )
    openrouter_max_price_routing: bool = Field(
        False,
        description="send OpenRouter its provider.max_price routing option with the maximum "
        "of max_price_per_mtok_usd, so it never routes above it (off by default: its "
        "acceptance on /v1/systemone is not confirmed)",
    )

    # --- menu runtimes (chat completions) --------------------------------------------------
    default_runtime: str = Field("faux", description="chat runtime of a menu job that names none")
    openrouter_chat_model: str | None = Field(None, description="OpenRouter chat model default")
    openai_chat_model: str | None = Field(None, description="OpenAI chat model default")
    chat_hosts: dict[str, ChatHost] = Field(
        default_factory=dict, description="extra chat-completions hosts, by runtime name (JSON)"
    )

    # --- deadlines and the ledger --------------------------------------------------------
    default_timeout_s: Seconds = Field(120.0, gt=0, description="deadline of a job that sets none")
    deadline_ceiling_s: Seconds = Field(900.0, gt=0, description="longest deadline a job may ask")
    lease_margin_s: Seconds = Field(30.0, ge=0, description="claim lease = deadline + this margin")
    visibility_timeout_s: Seconds = Field(
        3600.0,
        gt=0,
        description="broker redelivery timeout; must be well above the deadline ceiling",
    )
    intake_grace_s: Seconds = Field(
        60.0,
        gt=0,
        description="Redis broker: a job submitted this long ago that no worker took and the "
        "broker no longer holds is republished by the reaper (at most the visibility timeout)",
    )
    unacked_restore_interval_s: Seconds = Field(
        10.0, gt=0, description="how often a worker looks for messages past the visibility timeout"
    )
    unacked_restore_throttle: int = Field(
        10, ge=1, description="scan Redis for them on every Nth look only"
    )
    time_limit_slack_s: Seconds = Field(
        60.0, gt=0, description="task soft limit = ceiling + lease margin + this; hard: + half more"
    )
    reaper_interval_s: Seconds = Field(
        30.0, ge=0, description="how often a worker escalates expired claims (0: never)"
    )
    publish_marker_ttl_s: WholeSeconds = Field(
        7 * 24 * 3600, gt=0, description="how long publish-once holds"
    )
    accept_volatile_streams: bool = Field(
        False,
        description="start a worker even if the streams Redis does not persist (no AOF, no RDB):"
        " a restart of that Redis then loses replies and escalations",
    )

    # --- producers -----------------------------------------------------------------------
    chunk_size: int = Field(32, ge=1, le=1000, description="jobs per Celery message")
    pack_chunk_size: int = Field(
        100,
        ge=2,
        le=1000,
        description="jobs per Celery message of a packed batch (one state and provider a "
        "message; the worker packs them into as few requests as the limits allow)",
    )

    # --- input limits (shared.limits: the same checks in Client, submit, run and the worker) ---
    max_job_depth: int = Field(
        100, ge=8, le=200, description="nesting of a job's JSON, counted from the job object"
    )
    max_job_bytes: int = Field(40 * 2**20, ge=1024, description="a job's JSON in all, in bytes")
    # One job of max_job_bytes must fit (checked below): base64 in kombu's envelope, 40 MiB of
    # JSON is 53.3 MiB (shared.message_size); 64 MiB leaves a fifth for the spaces after the
    # wire text's separators, which the compact JSON max_job_bytes measures has not.
    max_message_bytes: int = Field(
        64 * 2**20,
        gt=0,
        description="a Celery message on the queue, in bytes: a worker drops a longer one "
        "before decoding it, a producer splits a batch under it (at least one job of "
        "DECISIONS_MAX_JOB_BYTES)",
    )
    max_state_bytes: int = Field(
        32 * 2**20,
        ge=1,
        le=32 * 2**20,
        description="a state, or a sift's items together (System One takes 32 MiB at most)",
    )
    max_metadata_bytes: int = Field(
        64 * 2**10, ge=1, description="a job's metadata (echoed in every reply), in bytes"
    )
    max_context_bytes: int = Field(2**20, ge=1, description="a menu job's context, in bytes")
    max_options_bytes: int = Field(
        2**20, ge=1, description="a menu job's options, schemas included, in bytes"
    )
    max_questions_bytes: int = Field(
        2**20, ge=1, description="a job's questions (a sift's question, a route's routes), in bytes"
    )
    max_string_bytes: int = Field(
        64 * 2**10,
        ge=1,
        description="one string or key outside a state, items, a prompt and a context",
    )

    # --- fleet-wide provider limits (worker.providers.redis_limiter) ------------------------
    provider_limits: dict[str, ProviderLimit] = Field(
        default_factory=dict,
        description='per provider, in Redis (JSON: {"openrouter": {"max_in_flight": 50, '
        '"per_second": 20}}); a provider not named is not limited',
    )
    limit_slot_ttl_s: Seconds = Field(
        60.0, gt=0, description="an in-flight slot frees itself after this (a dead worker's)"
    )

    # --- worker --------------------------------------------------------------------------
    worker_pool: Literal["loop", "prefork", "threads", "solo"] = Field(
        "loop",
        description="how `decisions worker` runs messages: loop (every message's jobs on the "
        "process's asyncio loop, DECISIONS_MAX_IN_FLIGHT requests in flight), or a Celery "
        "pool of DECISIONS_WORKER_CONCURRENCY processes or threads",
    )
    worker_concurrency: int = Field(
        2, ge=1, description="Celery pool processes or threads (prefork, threads, solo pools)"
    )
    # Twice this is Celery's prefetch count, which stops at 65,535 (past it Celery turns the
    # limit off: one worker took the whole queue).
    max_in_flight: int = Field(
        256,
        ge=1,
        le=32_767,
        description="provider requests in flight at once per worker process and provider "
        "(any pool); with the loop pool also the jobs running per provider, and twice as many "
        "jobs reserved (a message counts its jobs, or its bytes by 128 KiB)",
    )
    handlers: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="modules registering menu handlers (comma-separated or a JSON list)",
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Prometheus port (unset: no endpoint)"
    )
    metrics_addr: str = Field(
        "127.0.0.1",
        description="address the metrics endpoint listens on (with metrics_port); 0.0.0.0 "
        "where a scraper on another host (a container, a pod) reads it",
    )
    metrics_fleet_interval_s: Seconds = Field(
        15.0, gt=0, description="fleet gauges (ledger, escalations) are read at most this often"
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="worker logs: JSON lines, console lines, or auto (console on a tty)"
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    otel_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices("DECISIONS_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OTLP/HTTP base URL for OpenTelemetry traces (spans go to /v1/traces; "
        "needs the otel extra); unset: no tracing, nothing imported",
    )
    # Read by ``decisions`` from the environment before the settings (they may be what is
    # wrong); declared here so that it is documented with the others.
    debug: bool = Field(
        False, description="`decisions` shows an error's traceback, not its one-line explanation"
    )
    gc_first_threshold: int = Field(
        20_000,
        ge=0,
        le=2**31 - 1,  # gc.set_threshold takes a C int
        description="allocations between the cyclic GC's young collections in a worker "
        "(Python's default is 700; 0 leaves the GC as Python sets it)",
    )

    # --- reviewers -----------------------------------------------------------------------
    escalation_claim_idle_s: Seconds = Field(
        900.0, ge=0, description="an escalation claimed this long ago by a silent reviewer returns"
    )

    # --- calibration (shared.calibration) ------------------------------------------------
    calibration_min_labels: int = Field(
        30,
        ge=1,
        description="labels (effective) a calibrated escalate_below needs; fewer: its fallback",
    )
    calibration_ttl_s: Seconds = Field(
        60.0,
        gt=0,
        description="how long a worker keeps a calibrated threshold before reading labels again",
    )

    # --- recording responses for replay (tests, CI) ----------------------------------------
    record_dir: Path | None = Field(
        None, description="save every response a provider receives here, one file a request"
    )
    secret_headers: list[str] = Field(
        default_factory=list, description="response headers never written to a recording"
    )
    secret_fields: list[str] = Field(
        default_factory=list,
        description="JSON field paths (a.b.c, * for any key or item) redacted in recordings",
    )

    # --- reviewer console (``decisions console``) -------------------------------------------
    console_host: str = Field("127.0.0.1", description="address the console listens on")
    console_port: int = Field(8700, ge=1, le=65535, description="port the console listens on")
    console_users: dict[str, ConsoleUser] = Field(
        default_factory=dict, description="logins by name (JSON); none: nobody can log in"
    )
    console_session_max_age_s: WholeSeconds = Field(
        8 * 3600, ge=60, description="a login lasts this long"
    )
    console_https_only: bool = Field(
        False,
        description="the console is served over HTTPS (directly or behind a proxy): Secure "
        "cookies and HSTS (both also follow a request that arrives over https)",
    )
    console_users_file: Path = Field(
        Path("console-users.json"),
        description="logins file written by `decisions console add-user` (read if it exists, "
        "re-read when it changes; adds to DECISIONS_CONSOLE_USERS)",
    )
    console_login_free_failures: int = Field(
        5, ge=1, description="failed logins of an account or address before each waits"
    )
    console_login_lockout_max_s: WholeSeconds = Field(
        900, ge=1, description="longest wait after failed logins (doubling from 2 s)"
    )
    console_password_checks: int = Field(
        2, ge=1, le=64, description="password hashes computed at once (64 MiB each); more: 503"
    )

    @field_validator("log_level", mode="after")
    @classmethod
    def _log_level(cls, value: str) -> str:
        # Checked here so that a wrong name is explained naming its variable, not refused
        # later by Celery's command line as a bare usage error.
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"{value!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("image_stores", mode="after")
    @classmethod
    def _store_prefixes(cls, value: list[str]) -> list[str]:
        from shared.images import store_prefix  # the one reading of an allowlisted prefix

        return [store_prefix(text) for text in value]

    @field_validator("handlers", "image_stores", mode="before")
    @classmethod
    def _module_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _watch_host_keys(self) -> Settings:
        # A host's key is read from its own variable at request time; scrub it like ours.
        hosts: list[SystemOneHost | ChatHost] = [
            *self.systemone_hosts.values(),
            *self.chat_hosts.values(),
        ]
        for host in hosts:
            if host.key_env:
                watch_key_env(host.key_env)
        return self

    @model_validator(mode="after")
    def _message_holds_a_job(self) -> Settings:
        problem = message_cap_problem(self.max_message_bytes, self.max_job_bytes)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _ceiling_above_default(self) -> Settings:
        if self.default_timeout_s > self.deadline_ceiling_s:
            raise ValueError("default_timeout_s must not exceed deadline_ceiling_s")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once. Tests call ``get_settings.cache_clear()``."""
    return Settings()
