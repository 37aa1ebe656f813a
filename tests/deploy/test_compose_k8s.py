"""docker-compose.yml and deploy/k8s run the same worker: one command, one probe, one grace
period, one set of settings. tests/containers runs the compose fleet for real; this keeps the
manifests, which no cluster here runs, equal to what was run."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.deploy.support import ROOT, duration_s

#: Set in compose by its own services; in Kubernetes from the decisions-connections Secret.
CONNECTIONS = {"DECISIONS_BROKER_URL", "DECISIONS_REDIS_URL", "DECISIONS_LEDGER_URL"}
#: The faux provider is compose's demo provider; a cluster talks to a real one.
FAUX_ONLY = {"DECISIONS_FAUX_URL"}
#: Compose's default provider is the faux (overridable from .env), the cluster's a real one.
DIFFERENT_VALUES = {
    "DECISIONS_DEFAULT_PROVIDER": ("${DECISIONS_DEFAULT_PROVIDER:-faux}", "openrouter")
}


def _load(path: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(data["services"])


@pytest.fixture(scope="module")
def k8s() -> dict[str, Any]:
    docs = [
        d
        for name in ("worker-deployment", "configmap", "secrets", "migrate-job")
        for d in _load(f"deploy/k8s/{name}.yaml")
    ]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_the_same_commands_run(compose: dict[str, Any], k8s: dict[str, Any]) -> None:
    worker = _container(k8s["Deployment/decisions-worker"])
    migrate = _container(k8s["Job/decisions-migrate"])
    # The image's ENTRYPOINT (`decisions`) is kept; both set only its arguments.
    assert "command" not in worker and "command" not in migrate
    assert "entrypoint" not in compose["worker"] and "entrypoint" not in compose["migrate"]
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", (ROOT / "deploy/Dockerfile").read_text(), re.M)
    assert entrypoint and json.loads(entrypoint.group(1)) == ["decisions"]
    assert compose["worker"]["command"] == worker["args"]
    assert compose["migrate"]["command"] == migrate["args"]


def test_the_same_probe_and_port(compose: dict[str, Any], k8s: dict[str, Any]) -> None:
    worker = _container(k8s["Deployment/decisions-worker"])
    port = k8s["ConfigMap/decisions-settings"]["data"]["DECISIONS_METRICS_PORT"]
    assert compose["worker"]["environment"]["DECISIONS_METRICS_PORT"] == port
    assert compose["worker"]["expose"] == [port]
    assert {p["name"]: p["containerPort"] for p in worker["ports"]} == {"metrics": int(port)}
    # Ready means /readyz on the metrics port, in both.
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert f"http://127.0.0.1:{port}/readyz" in compose["worker"]["healthcheck"]["test"]
    # The same patience: compose's start period covers the pod's startup probe at least.
    startup = worker["startupProbe"]
    allowed_start = startup["periodSeconds"] * startup["failureThreshold"]
    assert duration_s(compose["worker"]["healthcheck"]["start_period"]) <= allowed_start


def test_the_same_grace_period(compose: dict[str, Any], k8s: dict[str, Any]) -> None:
    pod = k8s["Deployment/decisions-worker"]["spec"]["template"]["spec"]
    assert duration_s(compose["worker"]["stop_grace_period"]) == float(
        pod["terminationGracePeriodSeconds"]
    )
    # Kubernetes always sends SIGTERM first; compose must not send anything else.
    assert compose["worker"]["stop_signal"] == "SIGTERM"


def test_the_same_settings(compose: dict[str, Any], k8s: dict[str, Any]) -> None:
    env = {k: str(v) for k, v in compose["worker"]["environment"].items()}
    settings = k8s["ConfigMap/decisions-settings"]["data"]
    connections = k8s["Secret/decisions-connections"]["stringData"]
    worker = _container(k8s["Deployment/decisions-worker"])
    from_secrets = {v["name"] for v in worker["env"]}

    compose_settings = {
        k: v
        for k, v in env.items()
        if k.startswith("DECISIONS_") and k not in CONNECTIONS | FAUX_ONLY
    }
    assert set(compose_settings) == set(settings)
    for name, value in settings.items():
        expected = DIFFERENT_VALUES.get(name, (value, value))
        assert (compose_settings[name], value) == expected, name
    assert {k for k in env if k in CONNECTIONS} == set(connections) == CONNECTIONS
    # The provider keys: compose passes them through from the host, the pod from a Secret.
    keys = {k for k in env if not k.startswith("DECISIONS_")}
    assert keys == from_secrets
    assert all(env[k] == f"${{{k}}}" for k in keys)
    # The migration reads the same settings and connections as the workers.
    assert compose["migrate"]["environment"] == compose["worker"]["environment"]
    migrate = _container(k8s["Job/decisions-migrate"])
    assert migrate["envFrom"] == worker["envFrom"]
