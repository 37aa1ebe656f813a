"""Settings keep no password where remote control, a log or an exception shows them: every
URL is masked in every repr (also one set without validation), validation errors hide their
input, and the Celery app's config holds no settings object."""

from __future__ import annotations

import json
import pickle

import pytest
from pydantic import ValidationError

from shared.setting_types import ChatHost, MaskedUrl, SystemOneHost
from shared.settings import Settings
from worker.app import create_app

CANARY = "canary-hunter2-7f3a"


def _settings() -> Settings:
    return Settings(
        broker_url=f"redis://:{CANARY}b@127.0.0.1:6379/0",
        redis_url=f"rediss://user:{CANARY}r@cache:6380/1",
        ledger_url=f"postgresql+psycopg://dec:{CANARY}l@db:5432/dec?sslmode=require",
        faux_url=f"http://{CANARY}t@faux:8765",
        systemone_hosts={
            "mine": SystemOneHost(base_url=f"https://u:{CANARY}h@s1.example", key_env="MINE_KEY")
        },
        chat_hosts={"vllm": {"base_url": f"http://u:{CANARY}c@vllm:8000"}},
    )


def test_no_repr_of_the_settings_shows_a_password() -> None:
    settings = _settings()
    for text in (repr(settings), str(settings), f"{settings!r}", repr(settings.ledger_url)):
        assert CANARY not in text
    assert "dec:***@db:5432" in repr(settings)
    assert "sslmode=require" in repr(settings)


def test_the_urls_themselves_are_whole() -> None:
    settings = _settings()
    assert str(settings.ledger_url).startswith(f"postgresql+psycopg://dec:{CANARY}l@db")
    assert isinstance(settings.broker_url, MaskedUrl)
    assert f"{settings.broker_url}" == f"redis://:{CANARY}b@127.0.0.1:6379/0"
    assert json.loads(settings.model_dump_json())["redis_url"].count(CANARY) == 1
    assert pickle.loads(pickle.dumps(settings)).ledger_url == settings.ledger_url


def test_a_url_set_without_validation_is_masked_too() -> None:
    copied = Settings().model_copy(update={"ledger_url": f"postgresql://u:{CANARY}@db/x"})
    assert CANARY not in repr(copied)
    host = ChatHost.model_construct(base_url=f"http://u:{CANARY}@h")
    assert CANARY not in repr(host)


def test_a_validation_error_shows_no_input() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(ledger_url=f"postgresql://u:{CANARY}@db/x", default_timeout_s=10_000)
    assert CANARY not in str(info.value)
    with pytest.raises(ValidationError) as info:
        SystemOneHost(base_url=f"https://u:{CANARY}@h", key_env=["not", "a", "string"])
    assert CANARY not in str(info.value)


def test_the_celery_config_holds_no_settings_and_no_password() -> None:
    app = create_app(_settings())
    assert not any(key.startswith("decisions") for key in app.conf)
    # What `celery inspect conf` and `report` answer, defaults included.
    shown = json.dumps(app.conf.table(with_defaults=True), default=repr)
    assert CANARY not in shown
    assert CANARY not in app.conf.humanize(with_defaults=True)
    assert CANARY not in app.bugreport()
