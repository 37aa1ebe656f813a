"""Option and argument values click's types let through but that mean nothing (a count of 0,
NaN, an empty name or path, an age before year 1): refused by the option's name and the
values it takes (``worker.cli.option_values``), exit status 2, never a traceback; and
``Client.submit_batch(chunk_size=0)`` raises instead of using the default.

No case needs a server: each value is refused as it is parsed. Redis and the broker are on
a port nothing listens on, the ledger is a SQLite file of this module's own, and each server
(``faux serve``, ``console``) is given a port this module holds, so that one that accepted
its value (as they did before) ends at once instead of serving."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.client import Client
from shared.settings import Settings
from tests.cli.support import decisions, traceback_in

ROOT = Path(__file__).resolve().parents[2]
#: Nothing listens on port 1 of the loopback: a command that connects fails (status 1).
NOWHERE_REDIS = "redis://127.0.0.1:1/0"
#: Stands for the port this module holds (``held_port``) in a case's arguments.
HELD_PORT = "<held port>"


@dataclass
class Case:
    id: str
    args: tuple[str, ...]
    #: How click names the option or argument in its message ("Invalid value for '--x'";
    #: an argument by its name, "'batch'").
    option: str


SUBMIT = ("submit", "one.jsonl", "--reply-to", "r1")
FAUX = ("faux", "serve", "--port", HELD_PORT)

CASES = [
    # A time past ten years (the settings' bound) was "a bug": a socket's timeout or a
    # deadline past year 9999.
    Case("status-timeout-1e10", ("status", "--timeout", "1e10"), "--timeout"),
    # Under ten years but past what a socket wait takes (poll's 2**31 ms): the status table
    # said "broker unreachable: OverflowError: timeout is too large" (exit 1).
    Case("status-timeout-3e6", ("status", "--timeout", "3000000"), "--timeout"),
    Case("submit-wait-timeout-1e12", (*SUBMIT, "--wait", "--timeout", "1e12"), "--timeout"),
    # Ignored without the option they go with: a --timeout that bounded no wait, a --json
    # that printed the usual lines.
    Case("submit-timeout-without-wait", (*SUBMIT, "--timeout", "5"), "--timeout"),
    Case("submit-json-without-dry-run", (*SUBMIT, "--json"), "--json"),
    # The faux's mode options: a status code or a Retry-After its mode never sends.
    Case("faux-status-code-without-status", (*FAUX, "--status-code", "503"), "--status-code"),
    Case("faux-retry-after-with-ok", (*FAUX, "--retry-after", "5"), "--retry-after"),
    Case("faux-status-code-with-rate-limit",
         (*FAUX, "--mode", "rate_limit", "--status-code", "500"), "--status-code"),
    # Used the default chunk size (0), or one job a message (-5).
    Case("submit-chunk-size-0", (*SUBMIT, "--chunk-size", "0"), "--chunk-size"),
    Case("submit-chunk-size-negative", (*SUBMIT, "--chunk-size", "-5"), "--chunk-size"),
    # No minimum (-1), no threshold ever judged (nan), no suggestion ever (inf).
    *(
        Case(f"calibration-min-labels-{v}", ("calibration", "--no-store", "--min-labels", v),
             "--min-labels")
        for v in ("-1", "nan", "inf")
    ),
    # An empty or blank batch: a budget set, shown or resumed for a batch no job names.
    Case("budget-show-empty", ("budget", "show", ""), "batch"),
    Case("budget-show-blank", ("budget", "show", "   "), "batch"),
    Case("budget-show-too-long", ("budget", "show", "b" * 201), "batch"),
    Case("budget-set-empty", ("budget", "set", "", "5"), "batch"),
    Case("budget-set-control-character", ("budget", "set", "a\tb", "5"), "batch"),
    Case("budget-resume-blank", ("budget", "resume", " "), "batch"),
    # The whole ledger's figures, as if no --batch were given.
    Case("ledger-status-batch-empty", ("ledger", "status", "--batch", ""), "--batch"),
    *(
        Case(f"calibration-{o[2:]}-empty", ("calibration", "--no-store", o, ""), o)
        for o in ("--batch", "--question", "--provider", "--model")
    ),
    # An age before year 1 was "a bug" (OverflowError).
    Case("calibration-since-overflow", ("calibration", "--no-store", "--since", "9999999d"),
         "--since"),
    Case("calibration-since-too-big", ("calibration", "--no-store", "--since", "99999999999d"),
         "--since"),
    Case("ledger-republish-since-overflow",
         ("ledger", "republish", "--stream", "r1", "--since", "99999999999d"), "--since"),
    # A time past year 1 or 9999 in UTC was "a bug" too, in the ledger's query.
    Case("calibration-since-before-year-1-in-utc",
         ("calibration", "--no-store", "--since", "0001-01-01T00:00+01:00"), "--since"),
    Case("ledger-republish-since-after-9999-in-utc",
         ("ledger", "republish", "--stream", "r1", "--since", "9999-12-31T23:59-01:00"),
         "--since"),
    # No --since at all: every finished job.
    Case("ledger-republish-since-empty",
         ("ledger", "republish", "--stream", "r1", "--since", ""), "--since"),
    # Every escalation listed or claimed (no filter), the default reviewer, or "a bug".
    Case("escalations-list-reason-empty", ("escalations", "list", "--reason", ""), "--reason"),
    Case("escalations-list-batch-blank", ("escalations", "list", "--batch", " "), "--batch"),
    Case("escalations-claim-reviewer-empty", ("escalations", "claim", "--reviewer", ""),
         "--reviewer"),
    Case("escalations-claim-reviewer-reserved", ("escalations", "claim", "--reviewer", "queue"),
         "--reviewer"),
    Case("escalations-resolve-reviewer-blank",
         ("escalations", "resolve", "1-0", "--answer", "1", "--reviewer", "  "), "--reviewer"),
    Case("escalations-release-reviewer-control",
         ("escalations", "release", "1-0", "--reviewer", "a\nb"), "--reviewer"),
    Case("trace-job-id-empty", ("trace", ""), "job_id"),
    # The faux answered never (latency inf), sent "Retry-After: inf", never misbehaved
    # (--fail-first 0), listened on every interface (--host ""), replayed the current
    # directory (--replay "").
    Case("faux-latency-inf", (*FAUX, "--latency-ms", "inf"), "--latency-ms"),
    Case("faux-retry-after-inf",
         (*FAUX, "--mode", "rate_limit", "--retry-after", "inf"), "--retry-after"),
    Case("faux-fail-first-0", (*FAUX, "--mode", "refuse", "--fail-first", "0"), "--fail-first"),
    Case("faux-host-empty", (*FAUX, "--host", ""), "--host"),
    Case("faux-replay-empty", (*FAUX, "--replay", ""), "--replay"),
    # The default host; the current directory for results, recordings, logins.
    Case("console-host-empty", ("console", "--port", HELD_PORT, "--host", ""), "--host"),
    Case("run-out-empty", ("run", "one.jsonl", "--out", ""), "--out"),
    Case("record-dir-empty", ("record", "--dir", "", "--", "true"), "--dir"),
    Case("console-add-user-file-empty", ("console", "add-user", "bob", "--file", ""), "--file"),
    # A secret named by an empty text matches nothing: the secret meant is written.
    Case("record-secret-header-empty",
         ("record", "--dir", "rec", "--secret-header", "", "--", "true"), "--secret-header"),
    Case("record-secret-field-blank",
         ("record", "--dir", "rec", "--secret-field", " ", "--", "true"), "--secret-field"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("option-values")
    first = (ROOT / "examples" / "tickets.jsonl").read_text().splitlines()[0]
    (root / "one.jsonl").write_text(first + "\n")
    # A ledger with its schema: a value accepted is then used, not stopped by the schema.
    done = decisions("migrate", cwd=root, **_settings(root))
    assert done.code == 0, done.output[-1500:]
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def held_port() -> Iterator[int]:
    """A port something listens on: a faux that accepted its options cannot, and ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _settings(root: Path) -> dict[str, str]:
    return {
        "ledger_url": f"sqlite:///{root / 'ledger.db'}",
        "redis_url": NOWHERE_REDIS,
        "broker_url": NOWHERE_REDIS,
        "console_users_file": str(root / "users.json"),
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_meaningless_value_is_refused_by_its_option(
    case: Case, workdir: Path, held_port: int
) -> None:
    args = [str(held_port) if a == HELD_PORT else a for a in case.args]
    done = decisions(*args, cwd=workdir, timeout_s=60, **_settings(workdir))

    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert f"Invalid value for '{case.option}'" in done.stderr, done.output[-1500:]
    assert done.code == 2, done.output[-1500:]
    # The usage box of a bad value: "Usage", "Try ... --help", and the message in its frame.
    explanation = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(explanation) <= 5, done.stderr


@pytest.mark.parametrize("chunk_size", [0, -5])
def test_submit_batch_refuses_a_chunk_size_below_1(chunk_size: int) -> None:
    # Before: 0 used the settings' chunk size and -5 sent one job a message, silently.
    client = Client(Settings(redis_url=NOWHERE_REDIS, broker_url=NOWHERE_REDIS))
    with pytest.raises(ValueError, match="chunk_size"):
        client.submit_batch([], reply_to="r1", chunk_size=chunk_size)


@pytest.mark.parametrize("price", ["faux=nan", "faux=1e400/request"])
def test_a_price_no_estimate_can_use_is_refused_naming_price(price: str, workdir: Path) -> None:
    done = decisions(
        "submit", "one.jsonl", "--reply-to", "r", "--dry-run", "--price", price,
        cwd=workdir, timeout_s=60, **_settings(workdir),
    )  # fmt: skip
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 2, done.output[-1500:]
    assert done.stderr.startswith(f"--price: {price!r}: a price is a number of USD"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 2, done.stderr
