"""The settings of the services decision-worker uses, the first part of ``Settings``.

Where its broker, streams Redis and ledger are; which providers and chat runtimes answer,
where images are fetched from, at what price and within which budgets. A mixin of fields,
not a settings class of its own: ``shared.settings.Settings`` reads these from the
environment with its configuration (``DECISIONS_`` prefix, inputs hidden in errors, no
infinity). These are the first rows of the settings table (``decisions settings``,
README), which follows ``Settings``' field order: a base's fields come before the class's
own, so only the leading groups of fields can live in a base.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator

from shared.scrub import watch_key_env
from shared.setting_types import (
    BrokerUrl,
    ChatHost,
    HttpUrl,
    MaskedRepr,
    OptionalHttpUrl,
    RedisUrl,
    Seconds,
    StorePrefixes,
    SystemOneHost,
    Url,
    Usd,
)

__all__ = ["ServiceSettings"]


class ServiceSettings(MaskedRepr):
    """The services' fields of ``Settings`` (see there: read only as part of it)."""

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
    send_floor_quantile: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="a request is not sent with less time left before its job's deadline than"
        " this quantile of the provider's last 32 answer times (within a minute): it would"
        " likely be cut off in flight, its outcome unknown and maybe paid (the job escalates"
        " deadline_exceeded, nothing sent); 0: send while any time is left",
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
    image_stores: StorePrefixes = Field(
        default_factory=list,
        description="URL prefixes (https://host/path/) a job's image `ref` may point into, "
        "comma-separated or a JSON list; the worker fetches only from these (empty: a job "
        "with an image ref is rejected)",
    )
    image_fetch_timeout_s: float = Field(
        10.0, gt=0, le=120, description="longest fetch of one image ref from an image store"
    )

    # --- budgets (worker.ledger.budget_ops) ----------------------------------------------
    max_price_per_mtok_usd: dict[str, Usd] = Field(
        default_factory=dict,
        description='most a provider may charge per million request tokens, by provider (JSON:'
        ' {"openrouter": 0.5}); a request\'s worst case is its bytes at that price (TypeSafe,'
        " OpenAI and priced hosts default to their price; Parallel is its list price a "
        "request). A provider with neither cannot run under a budget. A menu runtime's "
        "entry is its price for input and output tokens alike (the higher of the two)",
    )
    daily_ceiling_usd: dict[str, Usd] = Field(
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
    menu_max_output_tokens: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="the most tokens a menu's model call may answer with, sent with every "
        "chat request (max_tokens; max_completion_tokens to OpenAI); with the runtime's "
        "max_price_per_mtok_usd it bounds a call's cost, so that menu jobs can run under a "
        "budget or a daily ceiling (unset: they cannot)",
    )

    @model_validator(mode="after")
    def _watch_host_keys(self) -> ServiceSettings:
        # A host's key is read from its own variable at request time; scrub it like ours.
        hosts: list[SystemOneHost | ChatHost] = [
            *self.systemone_hosts.values(),
            *self.chat_hosts.values(),
        ]
        for host in hosts:
            if host.key_env:
                watch_key_env(host.key_env)
        return self
