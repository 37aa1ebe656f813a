"""Images whose header cannot be read, or claims more pixels than any model takes: the image
is refused by its field (``images.<key>``), nothing sent, at submit and in the worker alike.

Pillow raised more than ``UnidentifiedImageError`` and ``OSError`` while opening a header:
``DecompressionBombError`` (a 60-byte PNG claiming 40000x40000 px) and ``ValueError``
("Truncated IHDR chunk"), among others. ``Client.estimate`` and ``decisions submit`` then
printed a traceback, and in the worker the job's plan raised out of its chunk: no terminal
message, for it or for the chunk's other jobs.
"""

from __future__ import annotations

import base64
import io
import json
import random
import struct
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from shared.client import Client
from shared.errors import DecisionProviderError
from tests.cli.support import decisions, traceback_in
from tests.images.test_image_jobs import replies
from tests.judgments.support import settings_for
from tests.support.services import redis_database, redis_url
from worker.embedded import run_batch
from worker.kinds.judgments import judgment_checker
from worker.process import context
from worker.providers import ProviderRegistry, plan_images
from worker.providers.images import MAX_IMAGE_PIXELS
from worker.testing.faux import FauxServer

REDIS_DB = 10
QUESTIONS = {"q": {"type": "noul", "instructions": "Is it the invoice?"}}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def claimed_png(width: int, height: int, *, second: tuple[int, int] | None = None) -> bytes:
    """A few dozen bytes of PNG whose header claims ``width`` x ``height`` px (and, with
    ``second``, a second IHDR before the pixels, which Pillow reads as the size)."""
    ihdr = [_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))]
    if second is not None:
        ihdr.append(_chunk(b"IHDR", struct.pack(">IIBBBBB", *second, 8, 2, 0, 0, 0)))
    idat = _chunk(b"IDAT", zlib.compress(b"\0" * 10))
    return b"\x89PNG\r\n\x1a\n" + b"".join(ihdr) + idat + _chunk(b"IEND", b"")


def png(width: int = 400, height: int = 300) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


def jpeg(width: int = 40, height: int = 30) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 10, 200)).save(out, format="JPEG")
    return out.getvalue()


def claimed_jpeg(width: int, height: int) -> bytes:
    """A real JPEG whose start-of-frame is rewritten to claim ``width`` x ``height`` px."""
    data = bytearray(jpeg())
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


# The fuzzed case that raised ValueError("Truncated IHDR chunk") (the IHDR's length says 1).
TRUNCATED_IHDR = bytes.fromhex(
    "89504e470d0a1a0a00000001494844520000002800" "00001e0802000000d1bfcb8a0000001a494441"
)


def _refused(data: bytes, model: str = "faux-1") -> DecisionProviderError:
    with pytest.raises(DecisionProviderError) as info:
        plan_images(["<i1>"], QUESTIONS, {"i1": data}, model=model, provider="t")
    assert info.value.code == "invalid_request" and info.value.field == "assets.i1"
    assert info.value.problem("assets.i1").field == "images.i1"
    return info.value


@pytest.mark.parametrize(
    "data",
    [
        claimed_png(40_000, 40_000),  # past Pillow's DecompressionBombError
        claimed_png(10_000, 10_000),  # past Pillow's DecompressionBombWarning
        claimed_png(8000, 8001),
        claimed_png(400, 300, second=(40_000, 40_000)),
        claimed_jpeg(40_000, 40_000),
        claimed_jpeg(65_535, 1_500),
    ],
    ids=["png-bomb", "png-warned", "png-just-over", "png-second-ihdr", "jpeg-bomb", "jpeg-wide"],
)
def test_an_image_claiming_more_pixels_than_any_model_takes_is_refused(data: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before Pillow warns of a bomb, too
        error = _refused(data)
    assert "px" in str(error) and "nothing was sent" in str(error)


def test_an_image_at_the_pixel_limit_is_read() -> None:
    side = int(MAX_IMAGE_PIXELS**0.5)
    assert side * side == MAX_IMAGE_PIXELS
    plan = plan_images(
        ["<i1>"], QUESTIONS, {"i1": claimed_png(side, side)}, model="faux-1", provider="t"
    )
    assert set(plan.assets) == {"i1"}


@pytest.mark.parametrize(
    "data",
    [
        TRUNCATED_IHDR,
        b"\x89PNG\r\n\x1a\n",
        claimed_png(0, 300),
        claimed_png(400, 300)[:20],
        b"\xff\xd8\xff",
        jpeg()[:40],
        b"\xff\xd8\xff\xe0\x00\x02",
    ],
    ids=["truncated-ihdr", "signature-only", "no-width", "cut-in-ihdr", "jpeg-magic-only",
         "jpeg-cut", "jpeg-empty-app0"],
)
def test_an_image_whose_header_cannot_be_read_is_refused(data: bytes) -> None:
    assert "nothing was sent" in str(_refused(data))


@pytest.fixture
def pillow_opened(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The images Pillow was asked to open (after the header check here let them through)."""
    opened: list[bytes] = []
    real_open = Image.open

    def recording(fp: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(fp.getvalue())
        return real_open(fp, *args, **kwargs)

    monkeypatch.setattr(Image, "open", recording)
    return opened


def _padded_png(parts: int) -> bytes:
    data = claimed_png(40, 30)
    ihdr_end = 8 + 25
    return data[:ihdr_end] + _chunk(b"abCD", b"") * parts + data[ihdr_end:]


def _padded_jpeg(padding: bytes) -> bytes:
    data = jpeg()
    app0_end = 2 + 2 + 16  # SOI, then the JFIF segment's marker and 16 bytes
    assert data[app0_end : app0_end + 2] == b"\xff\xdb"
    return data[:app0_end] + padding + data[app0_end:]


def test_a_header_is_checked_before_pillow_reads_it(pillow_opened: list[bytes]) -> None:
    """A bomb, a header of thousands of parts, and a megabyte of junk or fill between JPEG
    segments, which Pillow reads a byte at a time (16 MiB of either kept it busy for
    seconds), never reach Pillow."""
    for data in (
        claimed_png(40_000, 40_000),
        _padded_png(5000),
        _padded_jpeg(b"\0" * (1024 * 1024)),
        _padded_jpeg(b"\xff" * (1024 * 1024)),
    ):
        _refused(data)
    assert pillow_opened == []
    for data in (_padded_png(100), _padded_jpeg(b"\0" * 100), _padded_jpeg(b"\xff" * 100)):
        plan_images(["<i1>"], QUESTIONS, {"i1": data}, model="faux-1", provider="t")
    assert len(pillow_opened) == 3


def _mutants(seed: bytes, rng: random.Random, count: int) -> Iterator[bytes]:
    skip = 8 if seed.startswith(b"\x89PNG") else 3
    for _ in range(count):
        data = bytearray(seed)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(skip, len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(10, len(data))]
        yield bytes(data)


def test_damaged_images_are_read_or_refused_never_raised() -> None:
    """The reviewer's fuzz, smaller: every damaged header ends in a refusal or a size."""
    rng = random.Random(1)
    refused = 0
    for seed in (png(40, 30), jpeg()):
        for data in _mutants(seed, rng, 1500):
            try:
                plan_images(["<i1>"], QUESTIONS, {"i1": data}, model="faux-1", provider="t")
            except DecisionProviderError as exc:
                assert exc.field == "assets.i1", exc
                refused += 1
    assert refused > 0


def bomb_job(job_id: str, data: bytes | None = None) -> dict[str, Any]:
    image = base64.b64encode(data or claimed_png(40_000, 40_000)).decode("ascii")
    return {
        "id": job_id,
        "kind": "decide",
        "reply_to": "replies",
        "model": "faux-1",
        "state": {"photo": "<i1>"},
        "questions": QUESTIONS,
        "images": {"i1": {"format": "png", "data_base64": image}},
    }


@pytest.fixture
def server() -> Iterator[FauxServer]:
    with FauxServer() as running:
        yield running
    context.configure()


def test_the_client_rejects_it_naming_the_image(tmp_path: Path, server: FauxServer) -> None:
    settings = settings_for(tmp_path, server.url)
    registry = ProviderRegistry.from_settings(settings)
    client = Client(settings, checker=judgment_checker(registry, lambda job: []))
    jobs = [bomb_job("bomb"), bomb_job("truncated", TRUNCATED_IHDR), bomb_job("ok", png())]
    report = client.estimate(jobs, store=False)
    assert sorted(report.rejected) == ["bomb", "truncated"]
    for problems in report.rejected.values():
        assert [p.field for p in problems] == ["images.i1"]


def test_the_worker_rejects_it_and_sends_nothing(tmp_path: Path, server: FauxServer) -> None:
    jobs = [bomb_job("bomb"), bomb_job("truncated", TRUNCATED_IHDR), bomb_job("ok", png())]
    run_batch(
        jobs, settings=settings_for(tmp_path, server.url), out_dir=tmp_path / "out", timeout_s=60
    )
    got = replies(tmp_path / "out")
    assert set(got) == {"bomb", "truncated", "ok"}, got
    for job_id in ("bomb", "truncated"):
        assert got[job_id]["type"] == "rejected", got[job_id]
        assert [p["field"] for p in got[job_id]["problems"]] == ["images.i1"]
    assert got["ok"]["type"] == "result"
    assert server.provider.calls() == {"ok/decide": 1}


@pytest.mark.integration
def test_decisions_submit_says_it_in_one_line(tmp_path: Path) -> None:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text(json.dumps(bomb_job("bomb")) + "\n")
    with redis_database(REDIS_DB):
        url = redis_url(REDIS_DB)
        done = decisions(
            "submit", str(lines), "--reply-to", "replies", "--dry-run",
            cwd=tmp_path, redis_url=url, broker_url=url,
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        )  # fmt: skip
    assert traceback_in(done.output) is None, done.output
    assert "a bug in decisions" not in done.output
    said = [line for line in done.stderr.splitlines() if "bomb" in line]
    assert len(said) == 1 and "images.i1" in said[0], done.stderr
