"""The optional extras (issue 22): a producer installs only what it uses, and a worker without
``[metrics]`` or ``[images]`` still works, saying what to install for what it cannot do.

Each check runs in a subprocess whose meta-path refuses the missing packages
(``tests.support.blocked``), as an install without the extra would.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.processes import decisions_env
from tests.support.services import free_port, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 15
ROOT = Path(__file__).parents[2]

#: What a producer (``shared.client``) never needs: the extras, the worker's own stack (ledger,
#: HTTP clients) and the worker package itself.
NOT_A_PRODUCERS = (
    "prometheus_client",
    "PIL",
    "starlette",
    "uvicorn",
    "jinja2",
    "argon2",
    "itsdangerous",
    "multipart",
    "python_multipart",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "httpx",
    "httpcore",
    "worker",
)

PRODUCER = """
import json, sys
import redis
from shared import keys
from shared.client import Client
from shared.settings import Settings

url = sys.argv[1]
client = Client(Settings(broker_url=url, redis_url=url))
report = client.submit(
    {"id": "producer-1", "kind": "decide", "state": "a ticket",
     "questions": {"q": {"type": "noul", "instructions": "Is it urgent?"}}},
    reply_to="extras:replies",
)
queued = redis.Redis.from_url(url).llen(keys.CELERY_QUEUE)
print(json.dumps({"job_ids": report.job_ids, "rejected": list(report.rejected),
                  "queued": queued}))
"""


def blocked_run(
    args: list[str], blocked: tuple[str, ...], tmp_path: Path, **settings: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``args`` run under ``tests.support.blocked``; the process and the imports refused."""
    log = tmp_path / "blocked.log"
    env = decisions_env(**settings)
    env["BLOCKED_MODULES"] = ",".join(blocked)
    env["BLOCKED_LOG"] = str(log)
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.blocked", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tried = log.read_text().split("\n") if log.exists() else []
    return done, [line.split(" ", 1)[1] for line in tried if line]


@pytest.fixture(autouse=True)
def importable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    # The subprocesses run from tmp_path; ``tests.support.blocked`` comes from the repository.
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    monkeypatch.setenv("PYTHONPATH", ":".join(path))


def test_a_producer_submits_without_any_extra_nor_the_worker(tmp_path: Path) -> None:
    script = tmp_path / "producer.py"
    script.write_text(textwrap.dedent(PRODUCER))
    with redis_database(REDIS_DB):
        done, tried = blocked_run(
            [str(script), redis_url(REDIS_DB)], NOT_A_PRODUCERS, tmp_path
        )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"job_ids": ["producer-1"], "rejected": [], "queued": 1}
    # Not even tried: a producer's path has no optional import to fall back from.
    assert tried == []


def png_b64() -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (400, 300), (200, 10, 10)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode("ascii")


def test_a_worker_without_prometheus_client_answers_with_metrics_off(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        json.dumps(
            {
                "id": "no-metrics-1",
                "kind": "decide",
                "state": "a ticket",
                "questions": {"q": {"type": "noul", "instructions": "Is it urgent?"}},
            }
        )
        + "\n"
    )
    done, tried = blocked_run(
        ["decisions", "run", str(jobs), "--out", str(tmp_path / "out")],
        ("prometheus_client",),
        tmp_path,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        # Asked for: the worker must say why there are none, once.
        metrics_port=str(free_port()),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["job_id"] for line in results] == ["no-metrics-1"]
    said = done.stdout + done.stderr
    assert said.count("pip install 'decision-worker[metrics]'") == 1, said
    assert "Traceback" not in said
    assert "prometheus_client" in tried


def test_an_image_job_without_pillow_is_rejected_naming_the_extra(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        json.dumps(
            {
                "id": "no-pillow-1",
                "kind": "decide",
                "model": "typesafe/jev-1.14",
                "state": {"receipt": "<i1>"},
                "questions": {"q": {"type": "noul", "instructions": "Does it match <i1>?"}},
                "images": {"i1": {"format": "png", "data_base64": png_b64()}},
            }
        )
        + "\n"
    )
    done, tried = blocked_run(
        ["decisions", "run", str(jobs), "--out", str(tmp_path / "out")],
        ("PIL",),
        tmp_path,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    rejected = [
        json.loads(line)
        for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()
    ]
    assert [r["job_id"] for r in rejected] == ["no-pillow-1"]
    problems = rejected[0]["problems"]
    # The image named as the provider's refusals name it (the request's ``assets``).
    assert [p["field"] for p in problems] == ["images.i1"], problems
    assert "pip install 'decision-worker[images]'" in problems[0]["message"]
    assert "nothing was sent" in problems[0]["message"]
    assert not rejected[0].get("receipts")
    assert "PIL" in tried


@pytest.mark.parametrize("missing", ["starlette", "uvicorn", "argon2"])
def test_decisions_console_without_the_extra_says_what_to_install(
    tmp_path: Path, missing: str
) -> None:
    done, tried = blocked_run(
        ["decisions", "console"],
        (missing,),
        tmp_path,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert "pip install 'decision-worker[console]'" in " ".join(err.split())
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 2, err
    assert missing in tried
