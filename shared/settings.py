"""All of decision-worker's settings, read from ``DECISIONS_*`` variables (and ``.env``).

Provider API keys are the one exception: they are read by their own names
(``OPENROUTER_API_KEY``, ``PARALLEL_API_KEY``, ``TYPESAFE_API_KEY``, ``OPENAI_API_KEY``, or the
``key_env`` a host names) at the moment a request is made, and never stored here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["ChatHost", "ConsoleUser", "ProviderLimit", "Settings", "SystemOneHost", "get_settings"]


class SystemOneHost(BaseModel):
    """A host of the System One contract, by base URL (``POST {base}/v1/systemone``)."""

    base_url: str
    key_env: str
    default_model: str | None = None
    models: list[str] = Field(default_factory=list, description="models served; empty = any")
    #: USD per million input tokens, booked as an estimate when the host reports no cost.
    price_per_mtok_usd: float | None = None
    path: str = "/v1/systemone"
    request_id_header: str | None = None


class ChatHost(BaseModel):
    """An OpenAI-compatible chat-completions host for menus (``POST {base}{path}``): vLLM, a
    local server, any other by base URL. ``key_env`` unset: the host takes no key."""

    base_url: str
    key_env: str | None = None
    default_model: str | None = None
    models: list[str] = Field(default_factory=list, description="models served; empty = any")
    path: str = "/v1/chat/completions"
    #: Ask for usage accounting in the body (OpenRouter's ``usage: {include: true}``).
    usage_include: bool = False


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="DECISIONS_", env_file=".env", extra="ignore", env_nested_delimiter="__"
    )

    # --- where things live -------------------------------------------------------------
    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker URL")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding reply and escalation streams"
    )
    ledger_url: str = Field("sqlite:///./decisions.db", description="SQLAlchemy URL of the ledger")
    sqlite_busy_timeout_s: float = Field(5.0, description="SQLite busy timeout (several processes)")
    ledger_group_commit: bool = Field(
        True, description="group the ledger writes of concurrent jobs into shared transactions"
    )

    # --- providers ---------------------------------------------------------------------
    default_provider: str = Field("faux", description="provider of a job that names none")
    default_model: str | None = Field(None, description="model of a job that names none")
    provider_timeout_s: float = Field(30.0, description="longest single provider request")
    max_transport_attempts: int = Field(
        3, ge=1, le=10, description="sends of a provably unsent request"
    )
    faux_url: str | None = Field(
        None, description="base URL of a `decisions faux serve` (unset: the in-process faux)"
    )
    faux_latency_ms: float = Field(0.0, ge=0, description="latency of the in-process faux provider")
    openrouter_base_url: str = "https://openrouter.ai/api"
    openrouter_default_model: str | None = None
    typesafe_base_url: str = "https://api.typesafe.ai"
    typesafe_default_model: str = "jev-latest"
    typesafe_price_per_mtok_usd: float = 0.042
    parallel_base_url: str = "https://api.parallel.ai"
    parallel_list_price_usd: float = Field(
        0.001,
        validation_alias=AliasChoices(
            "DECISIONS_PARALLEL_LIST_PRICE_USD", "PARALLEL_LIST_PRICE_USD"
        ),
    )
    parallel_modes: list[str] = Field(
        default_factory=lambda: ["fast"],
        validation_alias=AliasChoices("DECISIONS_PARALLEL_MODES", "PARALLEL_MODES"),
    )
    openai_base_url: str = "https://api.openai.com"
    openai_default_model: str = "gpt-6-luna"
    openai_price_per_mtok_usd: float = 0.10
    systemone_hosts: dict[str, SystemOneHost] = Field(
        default_factory=dict, description="extra System One hosts, by provider name (JSON)"
    )

    # --- menu runtimes (chat completions) --------------------------------------------------
    default_runtime: str = Field("faux", description="chat runtime of a menu job that names none")
    openrouter_chat_model: str | None = Field(None, description="OpenRouter chat model default")
    openai_chat_model: str | None = Field(None, description="OpenAI chat model default")
    chat_hosts: dict[str, ChatHost] = Field(
        default_factory=dict, description="extra chat-completions hosts, by runtime name (JSON)"
    )

    # --- deadlines and the ledger --------------------------------------------------------
    default_timeout_s: float = Field(120.0, gt=0, description="deadline of a job that sets none")
    deadline_ceiling_s: float = Field(900.0, gt=0, description="longest deadline a job may ask")
    lease_margin_s: float = Field(30.0, ge=0, description="claim lease = deadline + this margin")
    visibility_timeout_s: float = Field(
        3600.0, description="broker redelivery timeout; must be well above the deadline ceiling"
    )
    unacked_restore_interval_s: float = Field(
        10.0, gt=0, description="how often a worker looks for messages past the visibility timeout"
    )
    unacked_restore_throttle: int = Field(
        10, ge=1, description="scan Redis for them on every Nth look only"
    )
    time_limit_slack_s: float = Field(
        60.0, gt=0, description="task soft limit = ceiling + lease margin + this; hard: + half more"
    )
    reaper_interval_s: float = Field(
        30.0, ge=0, description="how often a worker escalates expired claims (0: never)"
    )
    publish_marker_ttl_s: int = Field(7 * 24 * 3600, description="how long publish-once holds")

    # --- producers -----------------------------------------------------------------------
    chunk_size: int = Field(32, ge=1, le=1000, description="jobs per Celery message")
    pack_chunk_size: int = Field(
        100,
        ge=2,
        le=1000,
        description="jobs per Celery message of a packed batch (one state and provider a "
        "message; the worker packs them into as few requests as the limits allow)",
    )

    # --- fleet-wide provider limits (worker.providers.redis_limiter) ------------------------
    provider_limits: dict[str, ProviderLimit] = Field(
        default_factory=dict,
        description='per provider, in Redis (JSON: {"openrouter": {"max_in_flight": 50, '
        '"per_second": 20}}); a provider not named is not limited',
    )
    limit_slot_ttl_s: float = Field(
        60.0, gt=0, description="an in-flight slot frees itself after this (a dead worker's)"
    )

    # --- worker --------------------------------------------------------------------------
    worker_concurrency: int = Field(2, ge=1, description="Celery worker processes")
    handlers: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="modules registering menu handlers (comma-separated or a JSON list)",
    )
    metrics_port: int | None = Field(None, description="Prometheus port (unset: no endpoint)")
    metrics_addr: str = Field(
        "0.0.0.0", description="address the metrics endpoint listens on (with metrics_port)"
    )
    metrics_fleet_interval_s: float = Field(
        15.0, gt=0, description="fleet gauges (ledger, escalations) are read at most this often"
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="worker logs: JSON lines, console lines, or auto (console on a tty)"
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    gc_first_threshold: int = Field(
        20_000,
        ge=0,
        description="allocations between the cyclic GC's young collections in a worker "
        "(Python's default is 700; 0 leaves the GC as Python sets it)",
    )

    # --- reviewers -----------------------------------------------------------------------
    escalation_claim_idle_s: float = Field(
        900.0, description="an escalation claimed this long ago by a silent reviewer returns"
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
    console_secret_key: SecretStr | None = Field(
        None, description="signs session cookies (unset: a random key, sessions end on restart)"
    )
    console_session_max_age_s: int = Field(8 * 3600, ge=60, description="a login lasts this long")
    console_https_only: bool = Field(False, description="session cookie only over HTTPS")

    @field_validator("handlers", mode="before")
    @classmethod
    def _module_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _ceiling_above_default(self) -> Settings:
        if self.default_timeout_s > self.deadline_ceiling_s:
            raise ValueError("default_timeout_s must not exceed deadline_ceiling_s")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once. Tests call ``get_settings.cache_clear()``."""
    return Settings()
