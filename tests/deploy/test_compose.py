"""docker-compose.yml read side by side with the code: the Compose Specification's schema
(bundled by check-jsonschema, no network), every command the project's, every DECISIONS_*
variable a setting, and the operational choices the README promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.settings import Settings
from tests.deploy.support import (
    ROOT,
    check_celery_command,
    check_decisions_command,
    duration_s,
    setting_variables,
)
from worker.app import time_limits

COMPOSE = ROOT / "docker-compose.yml"
PROJECT_IMAGE = "decision-worker:local"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_it_validates_against_the_compose_specification() -> None:
    checker = Path(sys.executable).with_name("check-jsonschema")
    done = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_variable_has_an_empty_default() -> None:
    """podman-compose 1.0.3 (Debian bookworm's, which the README supports) reads a default
    only when it is not empty: ``${KEY:-}`` stays literal text, even with KEY set, and would
    reach the container as the value (a provider key that is not one)."""
    empty = re.findall(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-\}", COMPOSE.read_text())
    assert empty == []


def test_every_command_exists_in_the_project(compose: dict[str, Any]) -> None:
    checked = 0
    for name, service in services(compose).items():
        command = service.get("command")
        if service.get("image") == PROJECT_IMAGE:
            assert "build" in service, f"{name}: the project image is built here"
            assert isinstance(command, list), f"{name}: exec form, so `decisions` gets signals"
            check_decisions_command(command)
            checked += 1
        elif service.get("entrypoint") == ["celery"]:
            check_celery_command(command)
            checked += 1
    assert checked == 6  # migrate, faux, worker, console, cli; flower (celery)


def test_every_decisions_variable_is_a_setting(compose: dict[str, Any]) -> None:
    known = setting_variables()
    seen = set()
    for name, service in services(compose).items():
        for variable in environment(service):
            if variable.startswith("DECISIONS_"):
                assert variable in known, f"{name}: {variable} is read by no setting"
                seen.add(variable)
    assert {"DECISIONS_BROKER_URL", "DECISIONS_LEDGER_URL", "DECISIONS_METRICS_PORT"} <= seen
    # The values are valid settings too (a typo in a number fails here, not at start-up).
    worker_env = environment(services(compose)["worker"])
    Settings(
        **{
            k.removeprefix("DECISIONS_").lower(): v
            for k, v in worker_env.items()
            if k.startswith("DECISIONS_")
        }
    )


def test_redis_persists_and_never_evicts(compose: dict[str, Any]) -> None:
    redis = services(compose)["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    postgres = services(compose)["postgres"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert set(compose["volumes"]) >= {"redis-data", "postgres-data"}


def test_workers_scale_and_start_in_order(compose: dict[str, Any]) -> None:
    all_ = services(compose)
    worker = all_["worker"]
    # --scale worker=N: no fixed name, no host port to collide on.
    assert "container_name" not in worker and "ports" not in worker
    assert worker["depends_on"] == {
        "redis": {"condition": "service_healthy"},
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
        "faux": {"condition": "service_healthy"},
    }
    for name in ("redis", "postgres", "faux", "worker", "console"):
        assert all_[name]["healthcheck"]["test"], f"{name} has a health check"
    assert all_["migrate"]["command"] == ["migrate"]
    # Tried again until PostgreSQL answers where depends_on conditions are not honoured
    # (podman-compose before 1.3); bounded, so that a real error stops.
    assert re.fullmatch(r"on-failure:\d+", all_["migrate"]["restart"])
    assert all_["flower"]["profiles"] == ["flower"]
    assert all_["prometheus"]["profiles"] == ["monitoring"]
    # The worker's health check asks its own readiness endpoint, on its metrics port.
    port = environment(worker)["DECISIONS_METRICS_PORT"]
    assert f"127.0.0.1:{port}/readyz" in health_command(worker)
    assert worker["expose"] == [port]


def health_command(service: dict[str, Any]) -> str:
    """The shell command of a health check: a string (podman-compose 1.0.3 quotes a
    ["CMD", ...] list wrongly and consumes a replicated service's list)."""
    test = service["healthcheck"]["test"]
    assert isinstance(test, str), "a health check of the project image is a string"
    return test


def test_the_console_serves_on_its_port_once_migrated(compose: dict[str, Any]) -> None:
    console = services(compose)["console"]
    command = console["command"]
    port = command[command.index("--port") + 1]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert console["ports"] == [f"127.0.0.1:${{CONSOLE_PORT:-{port}}}:{port}"]
    assert f"127.0.0.1:{port}/healthz" in health_command(console)
    assert console["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert health_command(services(compose)["faux"])


def test_the_grace_period_outlasts_the_task_time_limit(compose: dict[str, Any]) -> None:
    worker = services(compose)["worker"]
    env = environment(worker)
    settings = Settings(
        deadline_ceiling_s=float(env["DECISIONS_DEADLINE_CEILING_S"]),
        lease_margin_s=float(env["DECISIONS_LEASE_MARGIN_S"]),
    )
    _soft, hard = time_limits(settings)
    grace = duration_s(worker["stop_grace_period"])
    assert grace > hard > settings.deadline_ceiling_s + settings.lease_margin_s
    assert worker["stop_signal"] == "SIGTERM"


def test_files_it_mounts_and_builds_exist(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is missing"
