"""Decide jobs that carry images, run by the worker against the faux (issue 21, item 1).

The requests are read back as the faux received them: Jev gets the tokens where the job put
them; another model gets an object state reshaped with ``image_fields`` and the images as
top-level array items; a token another model cannot read is refused before anything is sent.
The faux itself refuses a misplaced token for a non-Jev model (tests/faux/test_validation.py),
so a worker that stopped reshaping would fail here too.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import worker.testing.faux.app as faux_app
from shared.client import Client
from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from tests.judgments.support import PARALLEL_TEST_KEY, settings_for
from worker.console.state_view import state_images
from worker.embedded import run_batch
from worker.kinds.judgments import judgment_checker
from worker.process import context
from worker.providers import ProviderRegistry
from worker.providers.images import DANGER_ZONE_IMAGES_HEADER
from worker.testing.faux import FauxBehaviour, FauxServer


def png_b64(width: int = 400, height: int = 300) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode("ascii")


IMAGES = {
    "i1": {"format": "png", "data_base64": png_b64()},
    "i2": {"format": "png", "data_base64": png_b64(320, 300)},
}
QUESTIONS = {"match": {"type": "noul", "instructions": "Does the receipt match the invoice?"}}


def image_job(job_id: str, model: str, state: Any, **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "decide",
        "reply_to": "replies",
        "model": model,
        "state": state,
        "questions": QUESTIONS,
        "images": IMAGES,
        **fields,
    }


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FauxServer]:
    monkeypatch.setenv("PARALLEL_API_KEY", PARALLEL_TEST_KEY)
    with FauxServer() as running:
        yield running
    context.configure()


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Every System One request body (and headers) the faux checked, as it received it."""
    seen: list[tuple[dict[str, Any], dict[str, str]]] = []
    check = faux_app.check_images

    def recording(body: Mapping[str, Any], headers: Mapping[str, str], model: Any) -> None:
        seen.append((json.loads(json.dumps(body)), {k.lower(): v for k, v in headers.items()}))
        check(body, headers, model)

    monkeypatch.setattr(faux_app, "check_images", recording)
    return seen


def replies(out: Path) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}
    for name in ("results", "escalations", "rejected"):
        path = out / f"{name}.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                message = json.loads(line)
                got[message.get("job_id") or message.get("id")] = message
    return got


def test_image_jobs_reach_the_provider_as_the_seed_prescribes(
    tmp_path: Path, server: FauxServer, received: list[tuple[dict[str, Any], dict[str, str]]]
) -> None:
    jev_state = {"note": "compare <i1> with <i2>"}
    other_state = {"invoice": "<i1>", "note": "compare", "receipt": "<i2>"}
    batch = [
        image_job("jev", "typesafe/jev-1.14", jev_state),
        image_job("other", "faux-1", other_state),
        image_job("misplaced", "faux-1", {"note": "compare <i1> with <i2>"}),
        # The catalog lists it without image input: checked before the paid request.
        image_job("text-only", "liquid/d1", ["<i1>", "<i2>"]),
        image_job("refused", "typesafe/jev-1.14", jev_state),
    ]
    server.provider.override("refused/decide", FauxBehaviour(mode="refuse"))
    run_batch(
        batch, settings=settings_for(tmp_path, server.url), out_dir=tmp_path / "out", timeout_s=120
    )

    got = replies(tmp_path / "out")
    assert got["jev"]["type"] == "result" and got["other"]["type"] == "result", got
    assert "misplaced" in got and got["misplaced"]["type"] not in ("result", "escalation")
    assert "state.note" in json.dumps(got["misplaced"])
    assert server.provider.calls() == {"jev/decide": 1, "other/decide": 1, "refused/decide": 1}
    text_only = got["text-only"]
    assert text_only["type"] == "escalation" and "image input" in text_only["detail"], text_only
    # A reviewer sees the images: the escalation carries them, the console shows them.
    refused = got["refused"]
    assert refused["type"] == "escalation" and refused["reason"] == "decision_refused"
    context = refused["context"]
    assert context["assets"] == IMAGES
    shown = state_images(context["state"], context["assets"])
    assert [i.where for i in shown] == ["<i1>", "<i2>"]

    bodies = {body["model"]: (body, headers) for body, headers in received}
    assert set(bodies) == {"typesafe/jev-1.14", "faux-1"}
    for body, headers in bodies.values():
        assert headers[DANGER_ZONE_IMAGES_HEADER.lower()] == "true"
        assert body["assets"] == {key: {"type": "image", **image} for key, image in IMAGES.items()}
    assert bodies["typesafe/jev-1.14"][0]["state"] == jev_state
    assert bodies["faux-1"][0]["state"] == [
        {"note": "compare", "image_fields": ["invoice", "receipt"]},
        "<i1>",
        "<i2>",
    ]


@pytest.mark.parametrize(
    ("images", "field"),
    [
        ({"i 1": {"format": "png", "data_base64": png_b64()}}, "images.i 1"),
        ({"i1": {"format": "jpeg", "data_base64": png_b64()}}, "images.i1"),
        ({"i1": {"format": "png", "data_base64": "%%%"}}, "images.i1.data_base64"),
        ({}, "images"),
    ],
)
def test_a_bad_image_is_refused_at_submit_naming_it(images: Any, field: str) -> None:
    with pytest.raises(JobInvalid) as info:
        parse_job(image_job("bad", "faux-1", {"a": "<i1>"}, images=images))
    assert field in str(info.value)


def test_images_are_not_packed_yet() -> None:
    with pytest.raises(JobInvalid) as info:
        parse_job(image_job("bad", "faux-1", {"a": "<i1>", "b": "<i2>"}, pack=True))
    assert "images" in str(info.value)


def test_a_verified_image_job_places_the_images_for_each_model(
    tmp_path: Path, server: FauxServer, received: list[tuple[dict[str, Any], dict[str, str]]]
) -> None:
    state = {"invoice": "<i1>", "receipt": "<i2>"}
    job = image_job("verified", "typesafe/jev-1.14", state, verify={"model": "faux-1"})
    run_batch(
        [job], settings=settings_for(tmp_path, server.url), out_dir=tmp_path / "out", timeout_s=120
    )
    assert server.provider.calls() == {"verified/decide": 1, "verified/verify.0": 1}
    bodies = {body["model"]: body for body, _ in received}
    assert bodies["typesafe/jev-1.14"]["state"] == state
    assert bodies["faux-1"]["state"] == [{"image_fields": ["invoice", "receipt"]}, "<i1>", "<i2>"]
    for body in bodies.values():
        assert set(body["assets"]) == {"i1", "i2"}


def test_the_dry_run_and_client_refuse_a_token_the_model_cannot_read(tmp_path: Path) -> None:
    """Checked before queueing (``decisions submit``, ``Client``, the dry run): nothing sent."""
    settings = settings_for(tmp_path, "http://127.0.0.1:9")  # never reached
    registry = ProviderRegistry.from_settings(settings)
    client = Client(
        settings,
        checker=judgment_checker(registry, lambda job: registry.check(job.provider, job.model)),
    )
    jobs = [
        image_job("ok-jev", "typesafe/jev-1.14", {"note": "compare <i1> with <i2>"}),
        image_job("ok-other", "faux-1", {"invoice": "<i1>", "receipt": "<i2>"}),
        image_job("nested", "faux-1", {"a": {"b": "<i1>"}, "c": "<i2>"}),
        image_job("unreferenced", "typesafe/jev-1.14", {"note": "only <i1>"}),
    ]
    report = client.estimate(jobs, store=False)
    assert sorted(report.rejected) == ["nested", "unreferenced"]
    assert [p.field for p in report.rejected["nested"]] == ["state.a.b"]
    assert [p.field for p in report.rejected["unreferenced"]] == ["images.i2"]
    # Each problem names its field once ("state.a.b: state.a.b: ..." before).
    for problems in report.rejected.values():
        assert all(not p.message.startswith(p.field) for p in problems), problems


def test_a_route_job_with_images_reaches_the_provider_and_the_reviewer(
    tmp_path: Path, server: FauxServer, received: list[tuple[dict[str, Any], dict[str, str]]]
) -> None:
    def route(job_id: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": job_id,
            "kind": "route",
            "reply_to": "replies",
            "model": "faux-1",
            "state": {"invoice": "<i1>", "receipt": "<i2>"},
            "images": IMAGES,
            "routes": {"pay": "they match", "hold": "they differ"},
            **fields,
        }

    jobs = [route("routed"), route("refused")]
    server.provider.override("refused/route", FauxBehaviour(mode="refuse"))
    run_batch(
        jobs, settings=settings_for(tmp_path, server.url), out_dir=tmp_path / "out", timeout_s=120
    )
    got = replies(tmp_path / "out")
    assert got["routed"]["type"] == "result" and got["routed"]["value"] in ("pay", "hold")
    assert [body["state"] for body, _ in received] == [
        [{"image_fields": ["invoice", "receipt"]}, "<i1>", "<i2>"]
    ] * 2
    assert got["refused"]["type"] == "escalation"
    assert got["refused"]["context"]["assets"] == IMAGES
