"""A TLS broker (``rediss://``): its certificate is verified unless the URL says otherwise.

kombu alone connects to a ``rediss://`` broker without checking the certificate
(``CERT_NONE``) when the URL sets no ``ssl_*`` option: whoever answers on the broker's address
gets every job. ``shared.celery_producer.broker_ssl`` makes the producer and the worker
verify, as redis-py does for the reply streams on the same URLs.

Against a real redis-server of the test's own serving TLS, with a throwaway certificate
authority made by ``openssl``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from kombu import Connection

from shared.celery_producer import producer_app
from shared.client import Client
from shared.keys import CELERY_QUEUE
from shared.settings import Settings
from tests.faults.conftest import FleetFactory
from tests.support.ownservers import own_redis
from tests.support.services import free_port, unavailable

pytestmark = pytest.mark.faults

DB = 12


@dataclass(frozen=True)
class TlsRedis:
    port: int
    ca: Path

    def url(self, *, verified_by_ca: bool) -> str:
        query = f"?ssl_ca_certs={self.ca}" if verified_by_ca else ""
        return f"rediss://127.0.0.1:{self.port}/{DB}{query}"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url(verified_by_ca=True))


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A certificate authority nobody trusts but this test, and 127.0.0.1's certificate."""
    if shutil.which("openssl") is None:
        unavailable("openssl")
    folder = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "2", "-subj", "/CN=decisions-test-ca", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext",
             cwd=folder)
    return folder


@pytest.fixture(scope="module")
def tls_redis(certificates: Path) -> Iterator[TlsRedis]:
    port = free_port()
    extra = (
        "--tls-port", str(port),
        "--tls-cert-file", str(certificates / "server.pem"),
        "--tls-key-file", str(certificates / "server.key"),
        "--tls-ca-cert-file", str(certificates / "ca.pem"),
        "--tls-auth-clients", "no",
    )
    with own_redis(persist=False, extra=extra):
        server = TlsRedis(port, certificates / "ca.pem")
        client = server.client()
        client.flushdb()
        try:
            yield server
        finally:
            client.flushdb()
            client.close()


def _connect(url: str) -> Connection:
    conn: Connection = producer_app(Settings(broker_url=url)).connection_for_write()
    conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
    return conn


def test_a_producer_refuses_a_broker_it_cannot_verify(tls_redis: TlsRedis) -> None:
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        _connect(tls_redis.url(verified_by_ca=False))


def test_a_producer_reaches_a_broker_its_certificate_authority_vouches_for(
    tls_redis: TlsRedis,
) -> None:
    conn = _connect(tls_redis.url(verified_by_ca=True))
    try:
        queue = conn.SimpleQueue("decisions-tls-test")
        queue.put({"over": "tls"})
        assert queue.get(timeout=5).payload == {"over": "tls"}
    finally:
        conn.release()


def test_the_url_can_still_turn_verification_off(tls_redis: TlsRedis) -> None:
    # An operator's explicit choice (a broker with a certificate nobody signed, say).
    conn = _connect(f"rediss://127.0.0.1:{tls_redis.port}/{DB}?ssl_cert_reqs=none")
    conn.release()


def test_a_worker_runs_jobs_over_a_verified_tls_broker(
    new_fleet: FleetFactory, tls_redis: TlsRedis
) -> None:
    url = tls_redis.url(verified_by_ca=True)
    crew = new_fleet("tls", broker_url=url, streams_url=url, r=tls_redis.client())
    worker = crew.start_worker()
    jobs = crew.jobs(3)
    crew.submit(jobs)
    crew.expect_replies(crew.pairs(job["id"] for job in jobs))
    assert "insecure" not in worker.text()


def test_a_worker_takes_nothing_from_a_broker_it_cannot_verify(
    new_fleet: FleetFactory, tls_redis: TlsRedis
) -> None:
    verified = tls_redis.url(verified_by_ca=True)
    crew = new_fleet(
        "tls-unverified",
        broker_url=tls_redis.url(verified_by_ca=False),
        streams_url=verified,
        r=tls_redis.client(),
    )
    # Queued by a producer that trusts the CA: the job waits for a worker that may take it.
    producer = Settings(broker_url=verified, redis_url=verified, ledger_url=crew.ledger_url)
    Client(producer, redis_client=crew.r).submit_batch(crew.jobs(1), reply_to=crew.stream)
    assert crew.r.llen(CELERY_QUEUE) == 1
    worker = crew.start_worker(wait=False)
    # Refused at start, naming the setting (worker.process.broker_reach): Celery retried it
    # for ever before, and a TLS mistake is a configuration's, not a passing outage.
    assert worker.wait_exit(60) == 2, worker.text()[-1500:]
    said = worker.text()
    assert "refusing to start" in said and "DECISIONS_BROKER_URL" in said, said[-1500:]
    assert "CERTIFICATE_VERIFY_FAILED" in said, said[-1500:]
    assert crew.r.llen(CELERY_QUEUE) == 1  # still waiting: not taken
