"""deploy/Dockerfile read as a reviewer reads it: one BASE argument (the official slim image by
default), two stages, pip in the first only, a non-root user, exec-form entrypoint of a real
command, and a build context that carries what the image copies. tests/containers builds it
and proves the warm shutdown through a container."""

from __future__ import annotations

import json
import re
import shlex

from tests.deploy.support import ROOT, check_decisions_command, setting_variables

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|build-essential|make|clang|cargo|rustc)\b")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and heredoc bodies skipped."""
    found: list[tuple[str, str]] = []
    lines = iter(DOCKERFILE.read_text().splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        word, _, rest = line.strip().partition(" ")
        heredoc = re.search(r"<<'?(\w+)'?", rest)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break
        found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    split: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            split.append([])
        if split:
            split[-1].append((word, rest))
    return split


def test_one_base_argument_whose_default_is_the_official_slim_image() -> None:
    # ARG before the first FROM: the one knob CI turns (--build-arg BASE=localhost/base:...).
    first = next(i for i, (word, _) in enumerate(instructions()) if word == "FROM")
    args = [rest for word, rest in instructions()[:first] if word == "ARG"]
    assert args == ["BASE=python:3.11-slim"]
    # Both stages on it: the virtualenv's interpreter is the base's own.
    assert [stage[0][1].split()[0] for stage in stages()] == ["${BASE}", "${BASE}"]


def test_two_stages_and_no_build_tools_in_the_image() -> None:
    build, final = stages()
    assert build[0][1].endswith("AS build")
    for word, rest in final:
        assert word != "RUN" or not re.search(r"apt-get install|pip install", rest), rest
        assert not BUILD_TOOLS.search(rest) or word in ("LABEL",), rest
    copies = [rest for word, rest in final if word == "COPY"]
    assert copies == ["--from=build /opt/decisions /opt/decisions"]


def test_the_image_runs_as_a_user_without_privileges() -> None:
    final = stages()[-1]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert int(users[-1].split(":")[0]) >= 1000


def test_entrypoint_is_exec_form_of_a_real_command() -> None:
    final = dict(stages()[-1])
    entrypoint = json.loads(final["ENTRYPOINT"])
    command = json.loads(final["CMD"])
    assert entrypoint == ["decisions"]
    check_decisions_command(command)


def test_its_variables_are_settings() -> None:
    known = setting_variables()
    for word, rest in stages()[-1]:
        if word == "ENV":
            for pair in shlex.split(rest):
                name = pair.split("=", 1)[0]
                if name.startswith("DECISIONS_"):
                    assert name in known, name


def test_the_build_context_carries_what_is_copied() -> None:
    kept = {
        line[1:].rstrip("/") for line in IGNORE.read_text().splitlines() if line.startswith("!")
    }
    for word, rest in stages()[0]:
        if word == "COPY" and "--from" not in rest:
            *sources, _target = rest.split()
            for source in sources:
                assert source.rstrip("/") in kept, f"{source} is excluded from the context"
                assert (ROOT / source).exists(), source
