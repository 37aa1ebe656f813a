"""deploy/monitoring: the Prometheus configs scrape the port the workers serve on, and every
metric an alert names is one the workers export."""

from __future__ import annotations

import re

import yaml

from tests.deploy.support import ROOT

MONITORING = ROOT / "deploy" / "monitoring"
METRICS_FILES = sorted((ROOT / "worker" / "observability" / "metrics").glob("*.py"))
METRICS_SOURCE = "\n".join(p.read_text() for p in METRICS_FILES)


def test_compose_prometheus_scrapes_the_workers_metrics_port() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    port = compose["services"]["worker"]["environment"]["DECISIONS_METRICS_PORT"]
    (job,) = config["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["port"] == int(port)
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]


def test_every_metric_an_alert_names_is_exported() -> None:
    assert METRICS_FILES, "the metrics package moved: point METRICS_FILES at it"
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"][0]["rules"]
    named = set()
    for rule in rules:
        for metric in re.findall(r"\b(decisions_[a-z_]+)", rule["expr"]):
            named.add(metric)
            assert f'"{metric}"' in METRICS_SOURCE, f"{rule['alert']}: {metric} is not exported"
    assert len(named) >= 5
