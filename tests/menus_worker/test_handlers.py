"""The handler registry: decorator and function forms, unique names, signatures checked at
registration, modules imported from the working directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from shared.errors import ConfigurationError
from worker.kinds.menus.handlers import handler, load_handlers, register, registered, unregister


def test_the_decorator_and_register_put_handlers_in_the_registry() -> None:
    @handler("t_reg_a")
    def a(x: int) -> int:
        return x

    def b(y: str) -> str:
        return y

    try:
        assert register("t_reg_b", b) is b
        assert registered()["t_reg_a"] is a and registered()["t_reg_b"] is b
        register("t_reg_b", b)  # the same function again: a re-import, fine
        with pytest.raises(ConfigurationError, match="taken"):
            register("t_reg_b", a)
    finally:
        unregister("t_reg_a")
        unregister("t_reg_b")
    assert "t_reg_a" not in registered()


def test_a_handler_that_cannot_be_offered_to_a_model_is_refused_at_registration() -> None:
    def positional(x: int, /) -> int:
        return x

    with pytest.raises(ConfigurationError, match="positional-only"):
        register("t_reg_bad", positional)
    with pytest.raises(ConfigurationError, match="non-empty word"):
        register("two words", lambda: None)
    assert "t_reg_bad" not in registered()


def test_modules_are_imported_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "acme_handlers_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "desk.py").write_text(
        "from worker.kinds.menus.handlers import handler\n\n"
        "@handler('t_acme_close')\n"
        "def close(ticket: str) -> str:\n"
        "    '''Close a ticket.'''\n"
        "    return ticket\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    try:
        registry = load_handlers(["acme_handlers_pkg.desk", " "])
        assert registry["t_acme_close"]("T-1") == "T-1"
        with pytest.raises(ConfigurationError, match=r"acme_handlers_pkg\.missing"):
            load_handlers(["acme_handlers_pkg.missing"])
    finally:
        unregister("t_acme_close")
        for name in [m for m in sys.modules if m.startswith("acme_handlers_pkg")]:
            del sys.modules[name]
