"""All of decision-worker's settings, read from ``DECISIONS_*`` variables (and ``.env``).

Provider API keys are the one exception: they are read by their own names
(``OPENROUTER_API_KEY``, ``PARALLEL_API_KEY``, ``TYPESAFE_API_KEY``, ``OPENAI_API_KEY``, or the
``key_env`` a host names) at the moment a request is made, and never stored here.

``Settings`` is the settings of the services the worker uses (``shared.service_settings``:
broker, Redis, ledger, providers, runtimes, budgets) and, here, how it runs with them:
deadlines, sizes and limits, the worker process, reviewers, calibration, recording, the
console. A value's own checks are its type's (``shared.setting_types``); the checks across
settings are here.

Every URL setting is a ``MaskedUrl`` (``shared.setting_types``, with the hosts' and users'
shapes): the full URL wherever a string is used (a connection),
its password masked in every repr, so neither ``repr(settings)`` nor a validation error
(inputs hidden) nor anything that prints a settings object shows one. A host's ``key_env``
is watched by ``shared.scrub``, so its key is scrubbed from handler errors like the
providers' own.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.message_size import message_cap_problem
from shared.service_settings import ServiceSettings
from shared.setting_types import (
    LOG_LEVELS,
    ConsoleUser,
    LogLevel,
    NameList,
    ProviderLimit,
    ProxyAddresses,
    Seconds,
    WholeSeconds,
)

__all__ = [
    "LOG_LEVELS",
    "Settings",
    "get_settings",
]


# BaseSettings first: its __init__ reads the environment. ServiceSettings' fields come
# before the ones declared here (the order of ``decisions settings`` and README's table).
class Settings(BaseSettings, ServiceSettings):
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
        " a restart of that Redis then loses replies and escalations, and, when it is the"
        " broker too, the jobs still queued (only the producer's copy brings those back)",
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
    # JSON is 53.3 MiB (shared.message_size); 64 MiB leaves a fifth for what the job limit
    # does not measure: the stamps (reply_to, submitted_at) and a job object's defaults.
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
    handlers: NameList = Field(
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
    log_level: LogLevel = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
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
    console_trusted_proxies: ProxyAddresses = Field(
        default_factory=list,
        description="addresses of the proxies in front of the console (comma-separated): only "
        "theirs name the client (X-Forwarded-For) and scheme (X-Forwarded-Proto); none: both "
        "headers are ignored",
    )

    @model_validator(mode="after")
    def _message_holds_a_job(self) -> Settings:
        problem = message_cap_problem(self.max_message_bytes, self.max_job_bytes)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _ceiling_above_default(self) -> Settings:
        # A check across two settings has no one field to name the variable by (the CLI names
        # a field's): the message names both, with their values, and what to set.
        if self.default_timeout_s > self.deadline_ceiling_s:
            default, ceiling = _seconds(self.default_timeout_s), _seconds(self.deadline_ceiling_s)
            raise ValueError(
                f"DECISIONS_DEFAULT_TIMEOUT_S={default} exceeds "
                f"DECISIONS_DEADLINE_CEILING_S={ceiling} (a job's deadline cannot pass the "
                f"ceiling); set DECISIONS_DEFAULT_TIMEOUT_S to at most {ceiling} or "
                f"DECISIONS_DEADLINE_CEILING_S to at least {default}"
            )
        return self


def _seconds(value: float) -> str:
    # As the operator wrote it: "120", not "120.0"; and never "1e+06" (as :g would show it).
    return str(int(value)) if value.is_integer() else str(value)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once. Tests call ``get_settings.cache_clear()``."""
    return Settings()
