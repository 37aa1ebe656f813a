"""decision-worker's pytest plugin, loaded through the ``pytest11`` entry point ``decisions``.

Fixtures (each test gets its own; see the README, "Testing your integration"):

``faux_server``      a faux decision API on a loopback port (``FauxHandle``: ``url``,
                     ``counts``, ``behaviour``, ``misses()``); with ``decisions_replay`` it
                     answers from recordings, and a request without one fails the test.
``faux_url``         its base URL.
``faux_counts``      decision requests counted: ``total``, ``by_digest()``, ``by_call()``,
                     ``for_job(id)``; live, what the providers received from the real hosts.
``faux_behaviour``   its failure modes: ``faux_behaviour(mode="status", status_code=503)``,
                     ``faux_behaviour.for_job("t-2", mode="refuse")``, ``.reset()``.
``decisions_settings``  the worker's ``Settings``: every provider pointed at ``faux_server``
                     with a placeholder key, a SQLite ledger in ``tmp_path``; override it in a
                     conftest to change a setting.
``decisions_worker`` a real Celery worker in process (memory broker): ``submit(jobs)``
                     returns job id -> terminal message.
``reply_stream``     its reply streams: ``read()``, ``results()``, ``escalations()``,
                     ``rejected()``, ``of(job_id)``.
``decisions_live``   True when this test runs against the real providers.

Markers and options:

``@pytest.mark.decisions_replay("recordings")``  (or ``--decisions-replay DIR``) replay the
    responses ``decisions record`` saved in that directory (relative to the test file).
``@pytest.mark.decisions_live("openrouter", ...)``  with ``--decisions-live``, run this test
    against the real providers named; skipped, naming the variable, when a key is unset.
    Without the option it runs against the faux like any other.

Heavy imports (Celery, SQLAlchemy) happen in the fixtures, not when pytest loads the plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from shared.settings import Settings
    from worker.testing.handles import FauxBehaviourControl, FauxHandle, RequestCounts
    from worker.testing.harness import DecisionsWorker
    from worker.testing.streams import ReplyStream

__all__ = [
    "LIVE_MARK",
    "REPLAY_MARK",
    "decisions_live",
    "decisions_settings",
    "decisions_worker",
    "faux_behaviour",
    "faux_counts",
    "faux_server",
    "faux_url",
    "reply_stream",
]

LIVE_MARK = "decisions_live"
REPLAY_MARK = "decisions_replay"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("decisions", "decision-worker")
    group.addoption(
        "--decisions-live",
        action="store_true",
        default=False,
        dest="decisions_live",
        help="run tests marked decisions_live against the real providers (keys from the "
        "environment; a test whose key is unset is skipped)",
    )
    group.addoption(
        "--decisions-replay",
        default=None,
        dest="decisions_replay",
        metavar="DIR",
        help="faux_server answers from the responses recorded in DIR (decisions record)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{LIVE_MARK}(*providers): with --decisions-live, run against these real providers "
        "(skipped when a key variable is unset)",
    )
    config.addinivalue_line(
        "markers",
        f"{REPLAY_MARK}(directory): faux_server answers from the recordings in directory "
        "(relative to the test file); an unrecorded request fails the test",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.getoption("decisions_live"):
        return f"decisions: live (tests marked {LIVE_MARK} use the real providers)"
    return None


# --- modes -----------------------------------------------------------------------------------


@pytest.fixture
def decisions_live(request: pytest.FixtureRequest) -> bool:
    """True when this test runs against the real providers (marked, and ``--decisions-live``)."""
    marker = request.node.get_closest_marker(LIVE_MARK)
    if marker is None or not request.config.getoption("decisions_live"):
        return False
    from shared.settings import Settings
    from worker.testing.live import missing_keys

    settings = Settings()
    providers = [str(p) for p in marker.args] or [settings.default_provider]
    try:
        missing = missing_keys(providers, settings)
    except ValueError as exc:
        pytest.fail(f"@pytest.mark.{LIVE_MARK}: {exc}", pytrace=False)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        pytest.skip(f"{', '.join(missing)} {verb} not set: the live run of this test is skipped")
    return True


def _replay_dir(request: pytest.FixtureRequest) -> Path | None:
    marker = request.node.get_closest_marker(REPLAY_MARK)
    if marker is not None:
        if not marker.args:
            pytest.fail(f"@pytest.mark.{REPLAY_MARK} needs a directory", pytrace=False)
        return Path(request.path).parent / str(marker.args[0])
    option = request.config.getoption("decisions_replay")
    if option:
        return Path(request.config.invocation_params.dir) / str(option)
    return None


# --- the faux --------------------------------------------------------------------------------


@pytest.fixture
def faux_server(request: pytest.FixtureRequest, decisions_live: bool) -> Iterator[FauxHandle]:
    """A faux decision API on a free loopback port, for this test alone (it replays unless
    the test runs live: a live run is what makes recordings)."""
    from worker.testing.faux import FauxProvider, FauxServer
    from worker.testing.handles import FauxHandle

    replay = None if decisions_live else _replay_dir(request)
    if replay is not None and not replay.is_dir():
        pytest.fail(f"replay directory {replay} does not exist", pytrace=False)
    with FauxServer(FauxProvider(replay=replay)) as server:
        handle = FauxHandle(server)
        yield handle
        misses = handle.take_misses()
    if misses:
        lines = "\n".join(f"  {miss.message}" for miss in misses)
        pytest.fail(
            f"the replay had no recording for {len(misses)} request(s):\n{lines}", pytrace=False
        )


@pytest.fixture
def faux_url(faux_server: FauxHandle) -> str:
    return faux_server.url


@pytest.fixture
def faux_counts(faux_server: FauxHandle, decisions_live: bool) -> Iterator[RequestCounts]:
    """Decision requests so far: what reached the faux, or live what the real hosts answered."""
    if not decisions_live:
        yield faux_server.counts
        return
    from worker.providers.observers import observing
    from worker.testing.handles import LiveCounts

    with observing(LiveCounts()) as counts:
        yield counts


@pytest.fixture
def faux_behaviour(faux_server: FauxHandle, decisions_live: bool) -> FauxBehaviourControl:
    """The faux's failure modes (a live run of the test is skipped: real hosts take none)."""
    if decisions_live:
        pytest.skip("faux_behaviour injects failures into the faux: not in a live run")
    return faux_server.behaviour


# --- the worker ------------------------------------------------------------------------------


@pytest.fixture
def decisions_settings(
    tmp_path: Path,
    faux_server: FauxHandle,
    decisions_live: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Settings]:
    """Settings from the environment, with a SQLite ledger in ``tmp_path`` and, unless live,
    every provider (and every ``systemone_hosts`` host) at the faux with a placeholder key.

    Unless live, ``DECISIONS_RECORD_DIR`` records nothing: a recording run
    (``decisions record -- pytest --decisions-live``) keeps the real answers only.
    """
    from shared.settings import Settings
    from worker.providers.observers import recording_paused
    from worker.testing.handles import provider_urls
    from worker.testing.live import PLACEHOLDER_KEY, key_variables

    base = Settings()
    update: dict[str, object] = {
        "ledger_url": f"sqlite:///{tmp_path / 'decisions.db'}",
        "faux_url": faux_server.url,
    }
    if decisions_live:
        yield base.model_copy(update=update)
        return
    update.update(provider_urls(faux_server.url))
    update["systemone_hosts"] = {
        name: host.model_copy(update={"base_url": faux_server.url})
        for name, host in base.systemone_hosts.items()
    }
    # A real key in the environment is never sent to the faux.
    for variable in filter(None, key_variables(base).values()):
        monkeypatch.setenv(variable, PLACEHOLDER_KEY)
    with recording_paused():
        yield base.model_copy(update=update)


@pytest.fixture
def decisions_worker(decisions_settings: Settings) -> Iterator[DecisionsWorker]:
    """A real worker in process: ``decisions_worker.submit(jobs)`` -> {job id: reply}."""
    from worker.testing.harness import DecisionsWorker

    with DecisionsWorker(decisions_settings) as worker:
        yield worker


@pytest.fixture
def reply_stream(decisions_worker: DecisionsWorker) -> ReplyStream:
    """The worker's reply streams (its default one unless a stream is named)."""
    from worker.testing.streams import ReplyStream

    return ReplyStream(decisions_worker.sink, default_stream=decisions_worker.reply_to)
