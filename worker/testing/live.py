"""Which key variable each provider reads, for the plugin's two modes.

Against the faux every key variable is set to a placeholder, so a real key in the
environment is never sent to it. Live (``--decisions-live``), the real keys are used, and a
test whose providers lack one is skipped, naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from shared.settings import Settings

__all__ = ["BUILT_IN_KEYS", "PLACEHOLDER_KEY", "key_variables", "missing_keys"]

#: The built-in providers' key variables (the faux takes none).
BUILT_IN_KEYS: Final[dict[str, str | None]] = {
    "faux": None,
    "openrouter": "OPENROUTER_API_KEY",
    "typesafe": "TYPESAFE_API_KEY",
    "parallel": "PARALLEL_API_KEY",
    "openai": "OPENAI_API_KEY",
}
#: What the providers send the faux: not a secret, and visibly not a key.
PLACEHOLDER_KEY: Final = "faux-placeholder-not-a-key"


def key_variables(settings: Settings) -> dict[str, str | None]:
    """Provider name -> the variable its key is read from (``None``: no key)."""
    found = dict(BUILT_IN_KEYS)
    for name, host in settings.systemone_hosts.items():
        found[name] = host.key_env
    return found


def missing_keys(providers: Iterable[str], settings: Settings) -> list[str]:
    """The key variables of ``providers`` that are unset or empty (never their values).

    ``ValueError`` for a provider this configuration does not know.
    """
    known = key_variables(settings)
    missing: list[str] = []
    for name in providers:
        if name not in known:
            raise ValueError(f"unknown provider {name!r}; known: {', '.join(sorted(known))}")
        variable = known[name]
        if variable and not os.environ.get(variable, "").strip() and variable not in missing:
            missing.append(variable)
    return missing
