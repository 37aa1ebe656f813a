"""The faux's small model catalog, in TypeSafe's and OpenRouter's shapes.

One list of models serves both ``GET /v1/models`` (TypeSafe) and
``GET /api/v1/models?output_modalities=decisions`` (OpenRouter), and decides which models
take images: an image request to a text-only model is a 400, as OpenRouter's is. Jev reads
images under any of its names (``jev-...``, ``typesafe/jev-...``), listed or not.

A System One host configured by base URL reads its catalog at
``{base}/v1/models?output_modalities=decisions``; so ``/v1/models`` asked with that filter
answers TypeSafe's ``models`` *and* OpenRouter's ``data`` (ids there are the direct-host
names, with the OpenRouter id as ``canonical_slug``), and either reader finds its list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CATALOG",
    "DEFAULT_PRICE_PER_TOKEN_USD",
    "CatalogModel",
    "find_model",
    "is_jev",
    "openrouter_catalog",
    "price_per_token_usd",
    "takes_images",
    "typesafe_models",
]

#: Price of a model the catalog does not list (OpenRouter's ``usage.cost`` must be > 0).
DEFAULT_PRICE_PER_TOKEN_USD: Final = 1e-7


@dataclass(frozen=True)
class CatalogModel:
    id: str
    description: str
    release_date: str
    context_length: int
    prompt_price_per_token_usd: float
    takes_images: bool

    @property
    def short_name(self) -> str:
        """The name a direct host uses: OpenRouter's id without its vendor prefix."""
        return self.id.rsplit("/", 1)[-1]


CATALOG: Final[tuple[CatalogModel, ...]] = (
    CatalogModel("faux-1", "Faux decisions model (made-up stable answers)", "2026-01-01",
                 32_768, DEFAULT_PRICE_PER_TOKEN_USD, True),
    CatalogModel("typesafe/jev-1.14", "Jev 1.14 (faux listing)", "2026-09-15",
                 32_768, 0.042e-6, True),
    CatalogModel("typesafe/jev-latest", "Jev, latest release (faux listing)", "2026-09-15",
                 32_768, 0.042e-6, True),
    CatalogModel("liquid/d1", "Liquid D1 (faux listing)", "2026-07-01",
                 32_768, 0.05e-6, False),
    CatalogModel("perplexity/pplx-decider-v1.2", "Perplexity decider (faux listing)",
                 "2026-08-20", 16_384, 0.2e-6, False),
)

_BY_NAME: Final = {name: m for m in CATALOG for name in (m.id, m.short_name)}
_JEV: Final = re.compile(r"(^|/)jev(-|$)")


def is_jev(model: str | None) -> bool:
    """Jev by name, as the providers tell it (it reads image tokens anywhere)."""
    return bool(model and _JEV.search(model))


def find_model(model: str | None) -> CatalogModel | None:
    """A catalog entry by OpenRouter id or by its direct-host name (``jev-1.14``)."""
    return _BY_NAME.get(model) if model else None


def takes_images(model: str | None) -> bool:
    entry = find_model(model)
    return entry.takes_images if entry is not None else is_jev(model)


def price_per_token_usd(model: str | None) -> float:
    entry = find_model(model)
    return entry.prompt_price_per_token_usd if entry else DEFAULT_PRICE_PER_TOKEN_USD


def typesafe_models(output_modalities: str | None = None) -> dict[str, Any]:
    """``GET /v1/models``: ``{"models": [{"name", "description", "release_date"}]}``.

    With ``output_modalities`` it also carries OpenRouter's ``data`` (see the module doc).
    """
    out: dict[str, Any] = {
        "models": [
            {"name": m.short_name, "description": m.description, "release_date": m.release_date}
            for m in CATALOG
        ]
    }
    if output_modalities is not None:
        out["data"] = [_entry(m, m.short_name) for m in _listed(output_modalities)]
    return out


def _listed(output_modalities: str | None) -> tuple[CatalogModel, ...]:
    wanted = {part.strip() for part in (output_modalities or "").split(",")}
    return CATALOG if wanted & {"decisions", "all"} else ()


def _entry(m: CatalogModel, entry_id: str) -> dict[str, Any]:
    return {
        "id": entry_id,
        "canonical_slug": m.id,
        "name": m.description,
        "created": 0,
        "context_length": m.context_length,
        "pricing": {
            "prompt": format(m.prompt_price_per_token_usd, ".12f").rstrip("0"),
            "completion": "0",
            "request": "0",
            "image": "0",
        },
        "architecture": {
            "input_modalities": ["text", "image"] if m.takes_images else ["text"],
            "output_modalities": ["decisions"],
        },
    }


def openrouter_catalog(output_modalities: str | None) -> dict[str, Any]:
    """``GET /api/v1/models``: decision models only when ``output_modalities`` asks for them.

    Without the filter OpenRouter lists its chat models, none of which is a decisions model,
    so the faux lists none: a client that forgets the filter finds nothing, as it would.
    """
    return {"data": [_entry(m, m.id) for m in _listed(output_modalities)]}
