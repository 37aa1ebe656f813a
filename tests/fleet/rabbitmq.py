"""RabbitMQ for the fleet tests: a virtual host of the test's own on the local broker
(``amqp://guest:guest@127.0.0.1:5672``), made and deleted with ``rabbitmqctl``; and a fault
fleet whose broker is that vhost while replies and escalations stay on Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shared.settings import Settings
from tests.support.fleet import Fleet
from tests.support.processes import decisions_env
from tests.support.services import unavailable

__all__ = ["RABBITMQ_HOST", "RABBITMQ_PORT", "RabbitFleet", "rabbitmq_vhost"]

RABBITMQ_HOST = "127.0.0.1"
RABBITMQ_PORT = 5672


def _ctl(*args: str) -> None:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def rabbitmq_vhost(prefix: str) -> Iterator[str]:
    """A fresh vhost for guest; yields its broker URL; deleted (with its queues) at the end."""
    try:
        socket.create_connection((RABBITMQ_HOST, RABBITMQ_PORT), timeout=2).close()
    except OSError:
        unavailable(f"RabbitMQ at {RABBITMQ_HOST}:{RABBITMQ_PORT}")
    if shutil.which("rabbitmqctl") is None:
        unavailable("rabbitmqctl (to make a vhost of the test's own)")
    vhost = f"{prefix}-{uuid.uuid4().hex[:8]}"
    _ctl("add_vhost", vhost)
    try:
        _ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@{RABBITMQ_HOST}:{RABBITMQ_PORT}/{vhost}"
    finally:
        _ctl("delete_vhost", vhost)


@dataclass
class RabbitFleet(Fleet):
    """A fault fleet on RabbitMQ: ``broker_url`` is AMQP, streams live at ``redis_url``."""

    redis_url: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        return decisions_env(
            broker_url=self.broker_url,
            redis_url=self.redis_url,
            ledger_url=self.ledger_url,
            faux_url=self.faux_url,
            **{**self.settings, **extra},
        )

    def producer_settings(self) -> Settings:
        return Settings(
            broker_url=self.broker_url,
            redis_url=self.redis_url,
            ledger_url=self.ledger_url,
            deadline_ceiling_s=float(self.settings["deadline_ceiling_s"]),
            default_timeout_s=float(self.settings["default_timeout_s"]),
        )
