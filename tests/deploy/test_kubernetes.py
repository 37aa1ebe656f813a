"""deploy/k8s: built-in kinds validated against Kubernetes' own OpenAPI schemas
(kubernetes-validate bundles them; strict: an unknown field fails), KEDA's custom resources
checked by structure (no PyPI package ships KEDA's CRD schemas usable here), and everything
read side by side with the code: commands, settings, the queue's name, the time limits."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared import keys
from shared.settings import Settings
from tests.deploy.support import ROOT, check_decisions_command, setting_variables
from worker.app import time_limits

K8S = ROOT / "deploy" / "k8s"
KEDA = K8S / "keda"
#: The fields of a KEDA 2.x ScaledObject's spec and of a trigger (keda.sh/v1alpha1).
SCALED_OBJECT_SPEC = {
    "scaleTargetRef",
    "pollingInterval",
    "initialCooldownPeriod",
    "cooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
TRIGGER = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}


def documents(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path, doc))
    return found


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for _, d in documents(K8S) + documents(KEDA)}


def test_built_in_kinds_validate_strictly_against_kubernetes_schemas() -> None:
    version = kubernetes_validate.latest_version()
    docs = documents(K8S)
    assert {d["kind"] for _, d in docs} == {
        "ConfigMap",
        "Secret",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
    }
    for _path, doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    # The validator is no rubber stamp: a misspelt field of the Deployment is refused.
    deployment = next(d for _, d in docs if d["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_kustomizations_list_every_manifest() -> None:
    for directory in (K8S, KEDA):
        listed = yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]
        present = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
        assert sorted(listed) == present, directory


def worker_deployment(manifests: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return manifests[("Deployment", "decisions-worker")]


def settings_of(manifests: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    return dict(manifests[("ConfigMap", "decisions-settings")]["data"])


def test_every_decisions_variable_is_a_setting(manifests: dict[tuple[str, str], Any]) -> None:
    known = setting_variables()
    for (kind, name), doc in manifests.items():
        values = doc.get("data") or doc.get("stringData") or {}
        for variable in values:
            if variable.startswith("DECISIONS_"):
                assert variable in known, f"{kind}/{name}: {variable} is read by no setting"
    Settings(**{k.removeprefix("DECISIONS_").lower(): v for k, v in settings_of(manifests).items()})


def test_the_worker_is_probed_bounded_and_drained(manifests: dict[tuple[str, str], Any]) -> None:
    deployment = worker_deployment(manifests)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check_decisions_command(container["args"])
    assert container["args"] == ["worker"]

    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]

    config = settings_of(manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == int(config["DECISIONS_METRICS_PORT"])
    for probe, path in (
        ("startupProbe", "/readyz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == config["DECISIONS_METRICS_PORT"]

    settings = Settings(
        deadline_ceiling_s=float(config["DECISIONS_DEADLINE_CEILING_S"]),
        lease_margin_s=float(config["DECISIONS_LEASE_MARGIN_S"]),
        time_limit_slack_s=float(config["DECISIONS_TIME_LIMIT_SLACK_S"]),
    )
    _soft, hard = time_limits(settings)
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > hard > settings.deadline_ceiling_s + settings.lease_margin_s

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"mountPath": "/tmp", "name": "tmp"} in container["volumeMounts"]


def test_secrets_are_referenced_not_inlined(manifests: dict[tuple[str, str], Any]) -> None:
    for kind, name in (("Deployment", "decisions-worker"), ("Job", "decisions-migrate")):
        (container,) = manifests[(kind, name)]["spec"]["template"]["spec"]["containers"]
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef") or source.get("secretRef")
            ref_kind = "ConfigMap" if "configMapRef" in source else "Secret"
            assert (ref_kind, ref["name"]) in manifests, f"{name}: {ref['name']} is not defined"
        for variable in container.get("env", []):
            assert "value" not in variable or not variable["name"].endswith("_API_KEY")
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secret = manifests[("Secret", ref["name"])]
                assert ref["key"] in secret["stringData"], f"{ref} names no key of the Secret"
    keys_secret = manifests[("Secret", "decisions-provider-keys")]["stringData"]
    (worker,) = worker_deployment(manifests)["spec"]["template"]["spec"]["containers"]
    from_secret = {v["name"] for v in worker["env"] if "valueFrom" in v}
    assert (
        from_secret
        == set(keys_secret)
        == {
            "OPENROUTER_API_KEY",
            "PARALLEL_API_KEY",
            "TYPESAFE_API_KEY",
            "OPENAI_API_KEY",
        }
    )


def test_the_disruption_budget_and_the_migration_job(manifests: dict[tuple[str, str], Any]) -> None:
    pdb = manifests[("PodDisruptionBudget", "decisions-worker")]
    labels = worker_deployment(manifests)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    job = manifests[("Job", "decisions-migrate")]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    check_decisions_command(container["args"])


def test_keda_scales_the_worker_on_the_celery_queue(manifests: dict[tuple[str, str], Any]) -> None:
    scaled = manifests[("ScaledObject", "decisions-worker")]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert set(spec) <= SCALED_OBJECT_SPEC
    assert spec["scaleTargetRef"] == {"name": worker_deployment(manifests)["metadata"]["name"]}
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert set(trigger) <= TRIGGER
    assert trigger["type"] == "redis"
    metadata = trigger["metadata"]
    # KEDA's trigger metadata is a map of strings: a bare number is refused by the API.
    assert all(isinstance(v, str) for v in metadata.values())
    assert metadata["listName"] == keys.CELERY_QUEUE
    assert int(metadata["listLength"]) >= 1
    assert re.fullmatch(r"[\w.-]+:\d+", metadata["address"])
    auth = manifests[("TriggerAuthentication", trigger["authenticationRef"]["name"])]
    assert auth["apiVersion"] == "keda.sh/v1alpha1"
    for target in auth["spec"]["secretTargetRef"]:
        assert target["key"] in manifests[("Secret", target["name"])]["stringData"]
