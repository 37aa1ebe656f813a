"""A batch's name is a producer's text, shown as it is: never read as terminal markup. Found by
an attack: ``[/]`` ended ``decisions budget set`` (after it had set the budget), ``budget show``
and ``ledger status --batch`` in "unexpected error: MarkupError ... a bug"; ``[bold]x[/] y``
showed another batch's name, and ``[link=...]`` made a hyperlink of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import decisions, traceback_in

NAMES = ["[/]", "[bold]victim[/] x"]


@pytest.mark.parametrize("name", NAMES)
def test_budget_set_and_show_and_ledger_status_show_a_name_as_it_is(
    tmp_path: Path, name: str
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert decisions("migrate", cwd=tmp_path, ledger_url=url).code == 0
    for args in (
        ("budget", "set", "--", name, "1"),
        ("budget", "show", "--", name),
        ("ledger", "status", "--batch", name),
    ):
        done = decisions(*args, cwd=tmp_path, ledger_url=url)
        assert traceback_in(done.output) is None, done.output
        assert "unexpected error" not in done.output, done.output
        assert done.code == 0, (args, done.output)
        shown = " ".join(done.stdout.split())  # a title wraps at the table's width
        assert f"batch {name}" in shown, (args, done.stdout)
