"""What an explained error is (``Explanation``) and where its settings come from: the
variable a setting is read from, and its value with any password masked.

Shared by ``worker.cli.errors`` and ``worker.cli.connection_errors``. The settings are read
leniently: when they do not load (which may be the very error being explained), a URL
setting's value comes from the environment or its default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shared.scrub import mask_url
from shared.settings import Settings, get_settings
from worker.cli.settings_doc import env_names
from worker.process.logs import mask_passwords

__all__ = [
    "RUNTIME",
    "USAGE",
    "Explanation",
    "masked",
    "raw_setting",
    "setting_url",
    "setting_variable",
]

USAGE = 2
RUNTIME = 1


@dataclass(frozen=True)
class Explanation:
    problem: str
    fix: str | None = None
    exit_code: int = USAGE

    def lines(self) -> list[str]:
        """What is printed: none for an error that says itself (a closed output pipe)."""
        return [line for line in (self.problem, self.fix) if line]


def setting_variable(field: str) -> str:
    """The environment variable a ``Settings`` field is read from: of its names, the one the
    environment sets, else the first."""
    info = Settings.model_fields.get(field)
    if info is None:
        return f"DECISIONS_{field.upper()}"
    names = env_names(field, info)
    return next((name for name in names if name in os.environ), names[0])


def raw_setting(field: str) -> str:
    """A setting's value as the command would use it (unmasked: never print it as is)."""
    try:
        return str(getattr(get_settings(), field))
    except Exception:  # the settings themselves may be what is wrong
        default = Settings.model_fields[field].default
        return os.environ.get(setting_variable(field), str(default))


def setting_url(field: str) -> str:
    """A URL setting's value as it may be shown: its password masked, also when the value is
    no URL at all (``redis:/:pw@host``, which running text's masking does not recognise)."""
    return masked(mask_url(raw_setting(field), keep_user=True))


def masked(text: str) -> str:
    """``text`` with the password of any URL in it masked."""
    return mask_passwords(text)
