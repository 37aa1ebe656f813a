"""What the provider and runtime registries share: named instances, a default, owned clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Generic, TypeVar

import httpx

from shared.errors import ConfigurationError

__all__ = ["NamedRegistry"]

T = TypeVar("T")


class NamedRegistry(Generic[T]):
    #: What the registry holds, for error messages ("provider", "runtime").
    noun: ClassVar[str] = "entry"

    def __init__(
        self,
        items: Mapping[str, T],
        *,
        default_name: str,
        owned_clients: tuple[httpx.AsyncClient, ...] = (),
    ) -> None:
        if default_name not in items:
            raise ConfigurationError(
                f"default {self.noun} {default_name!r} is not known; known: "
                f"{', '.join(sorted(items))}"
            )
        self._items = dict(items)
        self.default_name = default_name
        self._owned = owned_clients

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def get(self, name: str | None = None) -> T:
        """The one called ``name`` (the default for ``None``); ``ConfigurationError`` if
        unknown, listing the known names."""
        key = name or self.default_name
        try:
            return self._items[key]
        except KeyError:
            raise ConfigurationError(
                f"unknown {self.noun} {key!r}; known: {', '.join(self.names())}"
            ) from None

    async def aclose(self) -> None:
        """Close the clients the registry made (never one passed in)."""
        for client in self._owned:
            await client.aclose()
