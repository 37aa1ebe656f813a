"""A Redis URL's database is checked with the settings, naming the setting and the form: a
database that is not a number (``/x``, ``/-1``, ``/1/2``) was read by redis-py as database 0
(or 12) without a word, and by the broker's transport as "a bug"; ``?db=`` on the broker's URL
was "a bug" too (Celery's transport takes no such option), and ``?db=x`` anywhere."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.settings import Settings

FIELDS = ("broker_url", "redis_url")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/x", "'x' is not a database number"),
        ("/-1", "'-1' is not a database number"),
        ("/1/2", "'1/2' is not a database number"),
        ("/0?db=x", "?db=x"),
    ],
)
def test_a_database_that_is_not_a_number_is_refused(field: str, path: str, says: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**{field: f"redis://127.0.0.1:6379{path}"})
    (error,) = info.value.errors()
    assert error["loc"] == (field,)
    assert says in error["msg"]
    assert "redis://HOST:PORT/DB" in error["msg"]


def test_the_broker_takes_no_db_option() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(broker_url="redis://127.0.0.1:6379/0?db=3")
    (error,) = info.value.errors()
    assert "?db=" in error["msg"] and "redis://HOST:PORT/DB" in error["msg"]


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("broker_url", "redis://127.0.0.1:6379/0"),
        ("broker_url", "redis://127.0.0.1:6379"),
        ("broker_url", "redis://127.0.0.1:6379/"),
        ("broker_url", "rediss://:pw@cache:6380/15?ssl_cert_reqs=required"),
        ("broker_url", "amqp://guest:guest@127.0.0.1:5672//"),
        ("broker_url", "memory://localhost/"),
        ("redis_url", "redis://127.0.0.1:6379/99"),  # the server says whether it has it
        ("redis_url", "redis://127.0.0.1:6379/0?db=3"),  # redis-py reads it
        ("redis_url", "unix:///run/redis.sock?db=2"),
    ],
)
def test_a_database_number_or_none_is_accepted(field: str, url: str) -> None:
    assert str(getattr(Settings(**{field: url}), field)) == url
