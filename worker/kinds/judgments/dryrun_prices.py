"""Prices the worker knows and a producer's machine may not: the faux's, per model.

``shared.estimate`` prices the faux at its default model's price; the worker side reads the
faux catalog (``worker.testing.faux.catalog``), so a dry run of jobs that name another faux model
(a verification with ``typesafe/jev-1.14``, say) is priced as the faux will book it.
"""

from __future__ import annotations

import math

from shared.prices import FAUX_PRICE_PER_MTOK_USD, Price
from worker import fakes

__all__ = ["MAX_PRICE_USD", "faux_price", "parse_price"]

#: The highest price ``--price`` takes, per million input tokens or per request: far above any
#: model's, and low enough that a batch's cost prints as a number a person reads.
MAX_PRICE_USD = 10_000.0


def faux_price() -> Price:
    # Through the door: a production command loads the faux's catalog only when asked.
    per_model = fakes.faux_catalog_prices()
    return Price(per_mtok_usd=FAUX_PRICE_PER_MTOK_USD, per_model_mtok_usd=per_model)


def parse_price(text: str) -> tuple[str, Price]:
    """``PROVIDER=USD`` per million input tokens, or ``PROVIDER=USD/request``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{text!r}: expected PROVIDER=USD_PER_MTOK or PROVIDER=USD/request")
    amount = value.strip()
    per_request = amount.endswith("/request")
    try:
        usd = float(amount.removesuffix("/request"))
    except ValueError:  # float()'s own words named no option (found by an attack)
        usd = math.nan
    if usd < 0:
        raise ValueError(f"{text!r}: a price is not negative")
    # float() takes nan, inf and 1e400 (inf): the estimate printed "$nan", and stored for the
    # batch, `ledger status` showed it too (found by an attack).
    if not math.isfinite(usd) or usd > MAX_PRICE_USD:
        raise ValueError(
            f"{text!r}: a price is a number of USD from 0 to {MAX_PRICE_USD:g} "
            "(per million input tokens, or per request with /request)"
        )
    price = Price(per_request_usd=usd) if per_request else Price(per_mtok_usd=usd)
    return name.strip(), price
