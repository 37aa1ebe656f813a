"""What each provider charges, and the most it may charge (what a budget reserves).

``default_prices`` reads the settings (list prices, per-million-token prices, the configured
maximums, ``settings.max_price_per_mtok_usd``); ``price_table`` adds a caller's overrides.
``shared.estimate`` prices a batch with them; the worker's dry run adds the faux's catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from shared.settings import Settings

__all__ = [
    "BUDGET_SLACK_USD",
    "FAUX_PRICE_PER_MTOK_USD",
    "UNKNOWN_PRICE",
    "Price",
    "PriceBasis",
    "default_prices",
    "price_table",
]

#: How far what a budget holds may pass its limit: a micro-dollar. Sums of floats drift
#: (0.1 + 0.1 + 0.1 is 0.30000000000000004 > 0.3, in Python as in SQL), and reservations are
#: rounded up at 1e-12 (``worker.ledger.budget_ops.ceil_usd``): without it a budget of $0.30
#: refused the third request of $0.10. A budget is passed by no more than this, once. The
#: ledger's reservation and the producer's estimate judge a fit alike.
BUDGET_SLACK_USD: Final = 1e-6

#: The faux's price for its default model (``worker.testing.faux.catalog``: 1e-7 USD a token).
FAUX_PRICE_PER_MTOK_USD: Final = 0.10

PriceBasis = Literal["list_price", "tokens", "unknown"]


@dataclass(frozen=True)
class Price:
    """A provider's price: per request, or per million input tokens (optionally per model)."""

    per_request_usd: float | None = None
    per_mtok_usd: float | None = None
    per_model_mtok_usd: Mapping[str, float] = field(default_factory=dict)
    #: The most a million tokens may cost (what a budget reserves); None: no known maximum.
    max_per_mtok_usd: float | None = None

    @property
    def basis(self) -> PriceBasis:
        if self.per_request_usd is not None:
            return "list_price"
        if self.per_mtok_usd is not None or self.per_model_mtok_usd:
            return "tokens"
        return "unknown"

    def cost(self, model: str | None, tokens: int) -> float | None:
        if self.per_request_usd is not None:
            return self.per_request_usd
        per_mtok = self.per_model_mtok_usd.get(model or "", self.per_mtok_usd)
        return None if per_mtok is None else per_mtok * tokens / 1_000_000

    def worst(self, body_bytes: int) -> float | None:
        """The most a request of ``body_bytes`` can cost (a token is at least a byte)."""
        if self.per_request_usd is not None:
            return self.per_request_usd
        if self.max_per_mtok_usd is None:
            return None
        return self.max_per_mtok_usd * body_bytes / 1_000_000


UNKNOWN_PRICE: Final = Price()


def default_prices(settings: Settings) -> dict[str, Price]:
    """Each provider's price, and its maximum as the worker reserves it (``worst_cost``)."""
    top = settings.max_price_per_mtok_usd
    typesafe = settings.typesafe_price_per_mtok_usd
    openai = settings.openai_price_per_mtok_usd
    prices = {
        "parallel": Price(per_request_usd=settings.parallel_list_price_usd),
        "typesafe": Price(per_mtok_usd=typesafe, max_per_mtok_usd=top.get("typesafe", typesafe)),
        "openai": Price(per_mtok_usd=openai, max_per_mtok_usd=top.get("openai", openai)),
        "faux": Price(per_mtok_usd=FAUX_PRICE_PER_MTOK_USD, max_per_mtok_usd=top.get("faux")),
        "openrouter": Price(max_per_mtok_usd=top.get("openrouter")),
    }
    for name, host in settings.systemone_hosts.items():
        prices[name] = Price(
            per_mtok_usd=host.price_per_mtok_usd,
            max_per_mtok_usd=top.get(name, host.price_per_mtok_usd),
        )
    return prices


def price_table(settings: Settings, overrides: Mapping[str, Price] | None) -> dict[str, Price]:
    """The default prices with ``overrides``; an override keeps the default's maximum (it
    says what a request costs, not what the worker reserves)."""
    table = default_prices(settings)
    for name, price in (overrides or {}).items():
        known = table.get(name)
        if price.max_per_mtok_usd is None and known is not None:
            price = replace(price, max_per_mtok_usd=known.max_per_mtok_usd)
        table[name] = price
    return table
