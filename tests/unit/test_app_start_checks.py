"""The start-up checks ``celery -A worker.app worker`` makes are this app's only.

``celeryd_init`` is sent for every Celery app's worker: a process that imports
``worker.app`` and runs an app of its own (the bench's no-op app) was refused for a ledger
it does not use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery, signals

import worker.app as worker_app
from shared.settings import get_settings


@pytest.fixture
def unmigrated_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("unmigrated_ledger")
def test_another_apps_worker_is_not_checked_for_the_ledger() -> None:
    other = SimpleNamespace(app=Celery("someone-else"))
    signals.celeryd_init.send(sender="w@h", instance=other, conf=other.app.conf, options={})


@pytest.mark.usefixtures("unmigrated_ledger")
def test_this_apps_worker_is_refused_on_a_ledger_behind(capsys: pytest.CaptureFixture[str]) -> None:
    ours = SimpleNamespace(app=worker_app.app)
    with pytest.raises(SystemExit) as stopped:
        signals.celeryd_init.send(sender="w@h", instance=ours, conf=ours.app.conf, options={})
    assert stopped.value.code != 0
    assert "refusing to start" in capsys.readouterr().err
