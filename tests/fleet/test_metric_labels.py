"""Label values stay in closed sets: raw messages with hostile kinds (a 5,075-character one,
one carrying a token, dozens of distinct ones) published straight to a running worker add
one ``other`` series, not one each, and none of their text reaches the metrics endpoint.
Unit checks pin each allowlist and keep the built-in provider names in step with the
registries."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from shared import keys
from shared.client import Client
from shared.settings import Settings
from tests.fleet.support import flushed, scrape, total, worker
from tests.support.fleet import decide_job, wait_until
from tests.support.ownservers import OwnRedis
from tests.support.processes import decisions_env
from tests.support.services import free_port, postgres_schema
from worker.ledger import Ledger
from worker.observability.metrics.labels import (
    BASES,
    BUILTIN_PROVIDERS,
    KINDS,
    OTHER,
    OUTCOMES,
    REASONS,
    STATUSES,
    Labels,
)
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry
from worker.testing.faux import FauxProvider

TOKEN = f"sk-live-{uuid.uuid4().hex}"
HOSTILE_KINDS = [
    "k" * 5075,
    f"Bearer {TOKEN}",
    *(f"kind-{i}-{uuid.uuid4().hex}" for i in range(30)),
]


# --- unit: the allowlists ---------------------------------------------------------------------


def test_the_builtin_providers_are_the_registries_names() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    faux = FauxProvider()
    providers = ProviderRegistry.from_settings(settings, faux_transport=faux.transport())
    runtimes = RuntimeRegistry.from_settings(settings, faux_transport=faux.transport())
    assert set(providers.names()) | set(runtimes.names()) == BUILTIN_PROVIDERS


def test_each_label_folds_what_is_not_in_its_set() -> None:
    labels = Labels.from_settings(
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            systemone_hosts={"mine": {"base_url": "https://s1.example", "key_env": "K"}},
            chat_hosts={"vllm": {"base_url": "http://vllm:8000"}},
        )
    )
    assert labels.provider("mine") == "mine" and labels.provider("vllm") == "vllm"
    assert labels.provider("faux") == "faux" and labels.provider("-") == "-"
    assert labels.provider("evil") == OTHER and labels.provider(None) == OTHER
    assert Labels().provider("mine") == OTHER
    assert {labels.kind(k) for k in KINDS} == KINDS and labels.kind("k" * 5075) == OTHER
    assert labels.kind(["decide"]) == OTHER
    assert labels.outcome("result") == "result" and labels.outcome("pwned") == OTHER
    assert labels.reason(None) == "" and labels.reason("low_confidence") == "low_confidence"
    assert labels.reason(f"token {TOKEN}") == OTHER
    assert labels.status("answered") == "answered" and labels.status("x") == OTHER
    assert labels.basis("reported") == "reported" and labels.basis("free") == OTHER
    for allowed in (KINDS, OUTCOMES, REASONS, STATUSES, BASES):
        assert all(len(v) <= 32 for v in allowed)


# --- a real worker ----------------------------------------------------------------------------


@dataclass
class Rig:
    port: int
    settings: Settings


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, redis_server: OwnRedis) -> Iterator[Rig]:
    logs = tmp_path_factory.mktemp("labels")
    with flushed(redis_server) as (_r, url), postgres_schema("labels") as ledger_url:
        with Ledger(ledger_url) as ledger:
            ledger.migrate()
        port = free_port()
        env = decisions_env(
            broker_url=url,
            redis_url=url,
            ledger_url=ledger_url,
            metrics_port=str(port),
            worker_concurrency="1",
            reaper_interval_s="0",
        )
        settings = Settings(broker_url=url, redis_url=url, ledger_url=ledger_url)
        with worker(env, logs / "worker.log"):
            yield Rig(port, settings)


@pytest.mark.integration
def test_the_endpoint_listens_on_loopback_by_default(rig: Rig) -> None:
    assert httpx.get(f"http://127.0.0.1:{rig.port}/healthz", timeout=5).status_code == 200
    # Bound to 127.0.0.1 only: no other address of this host answers.
    try:
        other = socket.gethostbyname(socket.gethostname())
    except OSError:
        pytest.skip("this host has no address but loopback")
    if other.startswith("127."):
        pytest.skip("this host's name resolves to loopback")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{other}:{rig.port}/healthz", timeout=5)


@pytest.mark.integration
def test_hostile_kinds_are_one_other_series(rig: Rig) -> None:
    stream = f"labels-{uuid.uuid4().hex[:6]}"
    before = scrape(rig.port)
    client = Client(rig.settings)
    for i, kind in enumerate(HOSTILE_KINDS):
        raw = {**decide_job(f"hostile-{i}-{uuid.uuid4().hex[:6]}"), "kind": kind}
        raw["reply_to"] = stream
        client.celery.send_task(keys.RUN_JOBS_TASK, kwargs={"jobs": [raw]}, queue=keys.CELERY_QUEUE)
    # And a job naming a provider nobody configured.
    odd = decide_job(f"odd-{uuid.uuid4().hex[:6]}", provider=f"prov-{TOKEN}", reply_to=stream)
    client.celery.send_task(keys.RUN_JOBS_TASK, kwargs={"jobs": [odd]}, queue=keys.CELERY_QUEUE)
    sent = len(HOSTILE_KINDS) + 1

    def rejected_all() -> bool:
        now = scrape(rig.port)
        done = total(now, "decisions_jobs_total") - total(before, "decisions_jobs_total")
        return done >= sent

    wait_until(rejected_all, 90, f"{sent} hostile jobs counted")
    text = httpx.get(f"http://127.0.0.1:{rig.port}/metrics", timeout=10).text
    assert TOKEN not in text and "k" * 64 not in text
    after = scrape(rig.port)
    series = [dict(labels) for (name, labels) in after if name == "decisions_jobs_total"]
    assert {s["kind"] for s in series} <= KINDS | {OTHER}
    assert {s["provider"] for s in series} <= BUILTIN_PROVIDERS | {"-", OTHER}
    assert {s["reason"] for s in series} <= REASONS | {OTHER}
    assert {s["outcome"] for s in series} <= OUTCOMES | {OTHER}
    # The 32 hostile kinds are one series.
    other = [s for s in series if s["kind"] == OTHER]
    assert len(other) == 1, other
    assert total(after, "decisions_jobs_total", kind=OTHER) - total(
        before, "decisions_jobs_total", kind=OTHER
    ) == len(HOSTILE_KINDS)
