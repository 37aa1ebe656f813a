"""What the provider and runtime registries share: named instances, a default, owned clients,
and the one factory that builds either from settings (``from_settings``).

The factory decides the clients once for both: one ``httpx.AsyncClient`` for every entry
(made and owned here unless passed in), and the faux's: the passed ``faux_transport``, else
``settings.faux_url`` through the shared client, else, with ``settings.faux_in_process``,
the in-process faux (``worker.fakes``); otherwise ``faux`` is absent, with the reason. A
subclass says only what its entries are (``Entries``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar

import httpx

from shared.errors import ConfigurationError
from shared.settings import Settings
from worker import fakes
from worker.http.cookies import DiscardingJar
from worker.providers.limiter import Limiter
from worker.providers.outbound import TransportPolicy

__all__ = ["Entries", "NamedRegistry"]

T = TypeVar("T")


@dataclass
class Entries(Generic[T]):
    """What a registry holds, each built on the client it is given."""

    faux: Callable[[httpx.AsyncClient], T]
    built_in: Callable[[httpx.AsyncClient], dict[str, T]]
    #: The operator's hosts by name (``settings.systemone_hosts``, ``settings.chat_hosts``).
    hosts: Mapping[str, Any]
    host: Callable[[str, Any, httpx.AsyncClient], T]
    default_name: str
    #: Keyword arguments of the registry's ``__init__`` beyond the shared ones.
    extra: dict[str, Any] = field(default_factory=dict)


class NamedRegistry(Generic[T]):
    #: What the registry holds, for error messages ("provider", "runtime").
    noun: ClassVar[str] = "entry"
    #: The setting naming the operator's hosts, for the error when one takes a built-in name.
    hosts_setting: ClassVar[str] = "hosts"
    #: Why there is no ``faux`` here, and how to get one.
    faux_absent: ClassVar[str] = "not loaded"

    @classmethod
    def entries(
        cls, settings: Settings, policy: TransportPolicy, limiter: Limiter | None
    ) -> Entries[T]:
        raise NotImplementedError

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        http: httpx.AsyncClient | None = None,
        faux_transport: httpx.AsyncBaseTransport | None = None,
        limiter: Limiter | None = None,
    ) -> Self:
        owned: list[httpx.AsyncClient] = []
        if http is None:
            http = httpx.AsyncClient(cookies=DiscardingJar())
            owned.append(http)
        policy = TransportPolicy.from_settings(settings)
        faux_http: httpx.AsyncClient | None = None
        if settings.faux_url and faux_transport is None:
            faux_http = http
        elif faux_transport is not None or settings.faux_in_process:
            transport = faux_transport or fakes.faux_transport(settings)
            faux_http = httpx.AsyncClient(transport=transport, cookies=DiscardingJar())
            owned.append(faux_http)
        entries = cls.entries(settings, policy, limiter)
        items: dict[str, T] = {}
        if faux_http is not None:
            items["faux"] = entries.faux(faux_http)
        items |= entries.built_in(http)
        for name, host in entries.hosts.items():
            if name in items:
                raise ConfigurationError(
                    f"{cls.hosts_setting}: {name!r} is a built-in {cls.noun}; choose another name"
                )
            items[name] = entries.host(name, host, http)
        return cls(
            items,
            default_name=entries.default_name,
            owned_clients=tuple(owned),
            absent={} if faux_http else {"faux": cls.faux_absent},
            **entries.extra,
        )

    def __init__(
        self,
        items: Mapping[str, T],
        *,
        default_name: str,
        owned_clients: tuple[httpx.AsyncClient, ...] = (),
        absent: Mapping[str, str] | None = None,
    ) -> None:
        #: Names known but not built here, each with the reason and how to get it (the faux
        #: outside tests): a job naming one, or relying on it as the default, is refused
        #: by field with that reason, and the worker still starts.
        self.absent = dict(absent or {})
        if default_name not in items and default_name not in self.absent:
            # The default comes from DECISIONS_DEFAULT_PROVIDER / DECISIONS_DEFAULT_RUNTIME.
            variable = f"DECISIONS_DEFAULT_{self.noun.upper()}"
            raise ConfigurationError(
                f"{variable}={default_name!r}: no such {self.noun}; set it to one of "
                f"{', '.join(sorted(items))} (or unset it)"
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
            raise ConfigurationError(self.unknown(key)) from None

    def unknown(self, name: str) -> str:
        """Why there is no ``name`` here: the reason it is absent, or the names known."""
        if name in self.absent:
            return f"{self.noun} {name!r}: {self.absent[name]}"
        return f"unknown {self.noun} {name!r}; known: {', '.join(self.names())}"

    async def aclose(self) -> None:
        """Close the clients the registry made (never one passed in)."""
        for client in self._owned:
            await client.aclose()
