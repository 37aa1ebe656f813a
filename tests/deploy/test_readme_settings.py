"""README's operator section carries the settings table, complete and current: generated from
the settings model by ``python -m worker.cli.settings_doc``."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.settings import Settings
from tests.deploy.support import ROOT
from worker.cli.settings_doc import BEGIN, END, env_names, main, replace_table, settings_table

README = ROOT / "README.md"


def test_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    assert replace_table(text, settings_table()) == text, (
        "README.md's settings table is stale: "
        "run `python -m worker.cli.settings_doc --write README.md`"
    )
    assert main(["--check", str(README)]) == 0


def test_the_table_names_every_setting_and_its_variables() -> None:
    text = README.read_text()
    table = text[text.index(BEGIN) : text.index(END)]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(Settings.model_fields)
    for name, info in Settings.model_fields.items():
        for variable in env_names(name, info):
            assert f"`{variable}`" in table, variable
    # An alias is listed as pydantic-settings reads it (both names).
    parallel = Settings.model_fields["parallel_list_price_usd"]
    assert env_names("parallel_list_price_usd", parallel) == [
        "DECISIONS_PARALLEL_LIST_PRICE_USD",
        "PARALLEL_LIST_PRICE_USD",
    ]


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    stale = README.read_text().replace("| `DECISIONS_BROKER_URL` |", "| `DECISIONS_BROKER` |", 1)
    path = tmp_path / "README.md"
    path.write_text(stale)
    assert main(["--check", str(path)]) == 1
    assert main(["--write", str(path)]) == 0
    assert path.read_text() == README.read_text()
    with pytest.raises(ValueError, match="markers"):
        replace_table("no table here", settings_table())
