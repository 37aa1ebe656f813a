"""``decisions run`` names its ledger without the password, and refuses a SQLite ledger it
cannot write as ``decisions worker`` does (found by an attack: ``ledger: postgresql+psycopg://
postgres:S3cretPW@...`` was printed whole, and ``sqlite:///x.db?mode=ro`` printed a raw
SAWarning line and wrote the file)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import decisions, one_job_file, traceback_in

ROOT = Path(__file__).resolve().parents[2]
SECRET = "S3cretPW"


def test_the_ledger_is_named_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:1/test?password={SECRET}"
    done = decisions("run", one_job_file(tmp_path), cwd=tmp_path, ledger_url=url, timeout_s=60)
    assert traceback_in(done.output) is None, done.output
    assert SECRET not in done.output, done.output
    assert "ledger: postgresql+psycopg://postgres:***@127.0.0.1:1/test" in done.stdout


def test_a_read_only_sqlite_ledger_is_refused_before_any_job(tmp_path: Path) -> None:
    assert decisions("migrate", cwd=tmp_path, ledger_url="sqlite:///ro.db").code == 0
    before = (tmp_path / "ro.db").read_bytes()
    done = decisions("run", one_job_file(tmp_path), cwd=tmp_path, ledger_url="sqlite:///ro.db?mode=ro")
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    assert "SAWarning" not in done.output
    assert "remove ?mode=ro from DECISIONS_LEDGER_URL" in done.stderr, done.output
    assert (tmp_path / "ro.db").read_bytes() == before


def test_calibration_names_an_unreachable_redis_without_its_password(tmp_path: Path) -> None:
    url = "sqlite:///l.db"
    assert decisions("migrate", cwd=tmp_path, ledger_url=url).code == 0
    redis_url = f"redis://u:{SECRET}@127.0.0.1:1/0?password={SECRET}"
    done = decisions("calibration", cwd=tmp_path, ledger_url=url, redis_url=redis_url)
    assert traceback_in(done.output) is None and done.code == 0, done.output
    assert SECRET not in done.output
    assert "labels waiting on Redis not stored (127.0.0.1:1/0: ConnectionError)" in done.stderr
