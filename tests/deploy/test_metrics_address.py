"""The metrics endpoint listens on loopback by default; every deployment file that turns it
on for a scraper elsewhere (another container, the kubelet, Prometheus in the cluster) says
``DECISIONS_METRICS_ADDR=0.0.0.0`` beside the port."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from shared.settings import Settings

ROOT = Path(__file__).parents[2]


def test_the_default_is_loopback() -> None:
    assert Settings.model_fields["metrics_addr"].default == "127.0.0.1"


def _dockerfile_env() -> dict[str, str]:
    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    return dict(re.findall(r"\b(DECISIONS_[A-Z_]+)=(\S+)", text))


def _compose_env() -> dict[str, str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {k: str(v) for k, v in compose["x-decisions-env"].items()}


def _configmap_env() -> dict[str, str]:
    configmap = yaml.safe_load((ROOT / "deploy" / "k8s" / "configmap.yaml").read_text())
    return {k: str(v) for k, v in configmap["data"].items()}


def test_each_deployment_that_serves_metrics_listens_beyond_loopback() -> None:
    for name, env in (
        ("deploy/Dockerfile", _dockerfile_env()),
        ("docker-compose.yml", _compose_env()),
        ("deploy/k8s/configmap.yaml", _configmap_env()),
    ):
        assert "DECISIONS_METRICS_PORT" in env, name
        assert env.get("DECISIONS_METRICS_ADDR") == "0.0.0.0", (
            f"{name} serves metrics to a scraper elsewhere: set DECISIONS_METRICS_ADDR=0.0.0.0"
        )
