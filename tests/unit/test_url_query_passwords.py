"""A password given in a URL's query (libpq and redis-py both take ``?password=``) is never
shown: not where the ledger is named, not in a setting's explanation, not in a log line.
Found by an attack: only a userinfo password (``user:secret@``) was hidden, so
``decisions migrate``, the console's start line, CLI connection errors and the worker's
ledger-outage lines printed ``?password=...`` whole."""

from __future__ import annotations

import pytest

from worker.cli.explanation import masked
from worker.ledger.engine import describe_url
from worker.process.logs import redact

SECRET = "Q2ueryPassXYZ"
URLS = [
    f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dx&password={SECRET}",
    f"postgresql+psycopg://postgres@127.0.0.1:5432/test?password={SECRET}&options=x",
    f"postgresql+psycopg://u:{SECRET}@h/db?sslpassword={SECRET}",
]
REDIS_URLS = [
    f"redis://127.0.0.1:1/0?password={SECRET}",
    f"rediss://user@host:6380/2?ssl_cert_reqs=none&password={SECRET}",
    f"redis://:{SECRET}@host/0",
]


@pytest.mark.parametrize("url", URLS)
def test_the_ledger_is_named_without_a_query_password(url: str) -> None:
    shown = describe_url(url)
    assert SECRET not in shown
    assert "127.0.0.1:5432/test" in shown or "@h/db" in shown  # still says which server
    assert "options=" in shown or "sslpassword=***" in shown  # other parameters kept


@pytest.mark.parametrize("url", URLS + REDIS_URLS)
def test_an_explanation_masks_a_query_password(url: str) -> None:
    line = f"connecting to Redis failed (Connection refused): DECISIONS_REDIS_URL={url}, next"
    shown = masked(line)
    assert SECRET not in shown
    assert shown.startswith("connecting to Redis failed") and shown.endswith(", next")


@pytest.mark.parametrize("url", URLS + REDIS_URLS)
def test_a_log_line_masks_a_query_password(url: str) -> None:
    event = redact(None, "warning", {"event": f"ledger at {url} down", "server": url})
    assert SECRET not in event["event"] and SECRET not in event["server"]
    assert event["event"].startswith("ledger at ") and event["event"].endswith(" down")


def test_a_url_without_secrets_is_shown_as_it_is() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3Datk"
    assert describe_url(url) == url
    assert masked(f"at {url}") == f"at {url}"
    assert redact(None, "info", {"event": "x", "server": url})["server"] == url
