"""Production does not load the fakes (issue 22): a worker without ``DECISIONS_FAUX_URL`` and
without ``DECISIONS_FAUX_IN_PROCESS`` has no ``faux`` provider nor runtime, never imports
``worker.testing.faux``, and rejects a job that names the faux (or relies on it as the default)
naming the field and the setting that would bring it, with nothing sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.client import Client
from shared.settings import Settings
from tests.support.processes import decisions_env, stop, wait_log
from tests.support.services import postgres_schema, redis_database, redis_url
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry

REDIS_DB = 3
ROOT = Path(__file__).parents[2]


def production(**update: object) -> Settings:
    fields: dict[str, object] = {"faux_url": None, "faux_in_process": False, **update}
    return Settings(**fields)  # type: ignore[arg-type]


def test_a_production_registry_has_no_faux_and_names_the_settings() -> None:
    providers = ProviderRegistry.from_settings(production())
    runtimes = RuntimeRegistry.from_settings(production())
    try:
        assert "faux" not in providers.names() and "faux" not in runtimes.names()
        for problems in (providers.check("faux", None), providers.check(None, None)):
            assert [p.field for p in problems] == ["provider"]
            assert "DECISIONS_FAUX_URL" in problems[0].message
        problems = runtimes.check(None, None)
        assert [p.field for p in problems] == ["runtime.provider"]
        assert "DECISIONS_FAUX_URL" in problems[0].message
    finally:
        asyncio.run(providers.aclose())
        asyncio.run(runtimes.aclose())


def test_the_faux_is_there_when_asked_for() -> None:
    for settings in (production(faux_in_process=True), production(faux_url="http://faux:8765")):
        providers = ProviderRegistry.from_settings(settings)
        try:
            assert "faux" in providers.names() and providers.check(None, None) == []
        finally:
            asyncio.run(providers.aclose())


@pytest.fixture
def worker_without_fakes(tmp_path: Path) -> Iterator[tuple[Settings, Path]]:
    """``decisions worker`` as production runs it, under a meta-path that refuses
    ``worker.testing.faux`` and logs every attempt (``tests.support.blocked``)."""
    attempts = tmp_path / "blocked.log"
    with redis_database(REDIS_DB), postgres_schema("nofakes") as ledger_url:
        env = decisions_env(
            broker_url=redis_url(REDIS_DB), redis_url=redis_url(REDIS_DB), ledger_url=ledger_url
        )
        env.pop("DECISIONS_FAUX_IN_PROCESS", None)  # the production default: not asked for
        env["BLOCKED_MODULES"] = "worker.testing.faux,worker.testing"
        env["BLOCKED_LOG"] = str(attempts)
        env["PYTHONPATH"] = ":".join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        log = tmp_path / "worker.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.blocked", "decisions", "worker",
                 "--migrate", "--concurrency=2"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                wait_log(log, "ready.", proc)
                settings = Settings(
                    broker_url=redis_url(REDIS_DB), redis_url=redis_url(REDIS_DB),
                    ledger_url=ledger_url,
                )
                yield settings, attempts
            finally:
                stop(proc, group=True)


@pytest.mark.integration
def test_a_default_worker_loads_no_fake_and_rejects_a_faux_job(
    worker_without_fakes: tuple[Settings, Path],
) -> None:
    settings, attempts = worker_without_fakes
    question = {"q": {"type": "noul", "instructions": "Is it urgent?"}}
    jobs = [
        {"id": "names-faux", "kind": "decide", "provider": "faux", "state": "s",
         "questions": question},
        {"id": "relies-on-default", "kind": "decide", "state": "s", "questions": question},
    ]
    client = Client(settings)
    report = client.submit_batch(jobs, reply_to="nofakes:replies")
    assert sorted(report.job_ids) == ["names-faux", "relies-on-default"]
    replies = {
        r.job_id: r for r in client.replies("nofakes:replies", job_ids=report.job_ids,
                                            timeout_s=120)
    }
    for job_id in report.job_ids:
        reply = json.loads(replies[job_id].model_dump_json())
        assert reply["type"] == "rejected", reply
        assert [p["field"] for p in reply["problems"]] == ["provider"]
        assert "DECISIONS_FAUX_URL" in reply["problems"][0]["message"]
    # Never even tried, in the main process or a pool process.
    assert not attempts.exists() or attempts.read_text() == ""
