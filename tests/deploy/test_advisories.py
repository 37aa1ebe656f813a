"""Dependency floors: every requirement in ``pyproject.toml`` admits no version that a
published advisory in ``deploy/advisories.toml`` names as vulnerable, and the versions
installed here satisfy the runtime floors."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[2]
ADVISORIES = ROOT / "deploy" / "advisories.toml"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def requirements() -> dict[str, Requirement]:
    """Every requirement pyproject.toml names (runtime, dev extras, build system), by name."""
    project = _pyproject()
    lines = [
        *project["project"]["dependencies"],
        *(line for extra in project["project"]["optional-dependencies"].values() for line in extra),
        *project["build-system"]["requires"],
    ]
    found = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r for r in found}


def advisories() -> list[dict[str, str]]:
    with ADVISORIES.open("rb") as handle:
        return list(tomllib.load(handle)["advisory"])


def floor(requirement: Requirement) -> Version | None:
    """The lowest version the requirement admits (its ``>=``/``==``/``~=`` bound), if any."""
    bounds = [
        Version(spec.version)
        for spec in requirement.specifier
        if spec.operator in (">=", "==", "~=", ">", "===")
    ]
    return max(bounds) if bounds else None


@pytest.mark.parametrize("advisory", advisories(), ids=lambda a: f"{a['package']}-{a['id']}")
def test_each_floor_is_at_or_above_the_first_fixed_version(advisory: dict[str, str]) -> None:
    name = canonicalize_name(advisory["package"])
    required = requirements().get(name)
    assert required is not None, (
        f"deploy/advisories.toml lists {advisory['package']}, which pyproject.toml does not "
        "require: drop the entry, or require the package"
    )
    lowest = floor(required)
    fixed = Version(advisory["fixed"])
    assert lowest is not None and lowest >= fixed, (
        f"pyproject.toml allows {required} ({advisory['id']} is fixed in {fixed}): "
        f'raise it to "{required.name}>={fixed}"'
    )


def test_every_entry_names_an_id_and_a_version() -> None:
    for advisory in advisories():
        assert advisory["id"].startswith(("CVE-", "GHSA-", "PYSEC-")), advisory
        Version(advisory["fixed"])


def test_the_installed_runtime_dependencies_satisfy_their_floors() -> None:
    runtime = [Requirement(line) for line in _pyproject()["project"]["dependencies"]]
    wrong = []
    for requirement in runtime:
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            wrong.append(f"{requirement.name} {installed} (pyproject.toml: {requirement})")
    assert not wrong, "installed below the floor: " + "; ".join(wrong)
