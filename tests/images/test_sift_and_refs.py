"""Images on sift jobs, and image refs fetched from an allowlisted store (issue 21, item 1).

The store is a real HTTP server on loopback; a second one stands for "anywhere else" and
counts every request it gets, so a ref that reached it (directly or through a redirect)
fails the test. Sift and route jobs are run by the worker against the faux, whose received
bodies are read back.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import worker.testing.faux.app as faux_app
from shared.client import Client
from shared.errors import JobInvalid
from shared.images import JobImage, ref_problem, store_prefix
from shared.job_parsing import parse_job
from shared.settings import Settings
from tests.images.test_image_jobs import png_b64, replies
from tests.judgments.support import PARALLEL_TEST_KEY, settings_for
from worker.embedded import run_batch
from worker.kinds.image_store import resolve_refs
from worker.kinds.judgments import judgment_checker
from worker.kinds.menus.submit import job_checker
from worker.process import context
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry
from worker.testing.faux import FauxServer

PNG = base64.b64decode(png_b64(400, 300))
PNG_2 = base64.b64decode(png_b64(320, 300))
#: ``job_fingerprint`` of the job below, computed by the code before image refs existed.
FINGERPRINT_BEFORE_REFS = "29daa7e710f0f9e45f2e932f1d49e80cce0dc2449150440e640e68ede0bd9b2f"


class _Store(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        status, headers, body = self.routes.get(self.path, (404, {}, b"no"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(routes: dict[str, tuple[int, dict[str, str], bytes]]) -> tuple[Any, list[str]]:
    hits: list[str] = []
    handler = type("Handler", (_Store,), {"routes": routes, "hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hits


@pytest.fixture
def stores() -> Iterator[tuple[str, str, list[str]]]:
    """(allowlisted store's prefix, elsewhere's base URL, elsewhere's hits)."""
    elsewhere, elsewhere_hits = _serve({"/imgs/a.png": (200, {"Content-Type": "image/png"}, PNG)})
    other = f"http://127.0.0.1:{elsewhere.server_address[1]}"
    png = {"Content-Type": "image/png"}
    store, _ = _serve(
        {
            "/imgs/a.png": (200, png, PNG),
            "/imgs/b.png": (200, png, PNG_2),
            "/imgs/typed-wrong.png": (200, {"Content-Type": "text/html"}, PNG),
            "/imgs/not-png.png": (200, png, b"<html>" + PNG),
            "/imgs/away.png": (302, {"Location": f"{other}/imgs/a.png"}, b""),
        }
    )
    try:
        yield f"http://127.0.0.1:{store.server_address[1]}/imgs/", other, elsewhere_hits
    finally:
        store.shutdown()
        elsewhere.shutdown()


@pytest.fixture
def faux(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FauxServer, list[dict[str, Any]]]]:
    monkeypatch.setenv("PARALLEL_API_KEY", PARALLEL_TEST_KEY)
    seen: list[dict[str, Any]] = []
    check = faux_app.check_images

    def recording(body: Mapping[str, Any], headers: Mapping[str, str], model: Any) -> None:
        seen.append(json.loads(json.dumps(body)))
        check(body, headers, model)

    monkeypatch.setattr(faux_app, "check_images", recording)
    with FauxServer() as running:
        yield running, seen
    context.configure()


# --- the allowlist, read once -------------------------------------------------------------

STORE = [store_prefix("https://images.example.com/claims")]


@pytest.mark.parametrize(
    "ref",
    [
        "https://images.example.com/claims-other/a.png",  # a prefix is a folder, not a string
        "https://images.example.com.evil.net/claims/a.png",
        "https://images.example.com@evil.net/claims/a.png",
        "https://evil.net/claims/a.png",
        "http://images.example.com/claims/a.png",  # another scheme
        "https://images.example.com:8443/claims/a.png",  # another port
        "https://images.example.com/claims/../admin/a.png",
        "https://images.example.com/claims/%2e%2e/admin/a.png",
        "https://images.example.com/claims/..%2fadmin/a.png",
        "https://images.example.com/claims\\..\\admin",
        "https://images.example.com/claims/a.png?redirect=https://evil.net",
        "https://images.example.com/claims/a.png#x",
        "file:///etc/passwd",
        "gopher://images.example.com/claims/a.png",
        "https://images.example.com/claims/a .png",
        "https://images.example.com/claims/\u2025/admin/a.png",  # two-dot leader
        "https://images.example.com/claims/\uff0e\uff0e/admin/a.png",  # fullwidth dots
        "https://images.example.com/claims/a.png\u3000",
        "https://images.exampl\u00e9.com/claims/a.png",
        "https://images.example.com/claims/%ZZ/a.png",
        "https://images.example.com/claims/a.png%",
        "https://images.example.com/claims//a.png",
    ],
)
def test_a_ref_outside_the_allowlist_is_refused(ref: str) -> None:
    assert ref_problem(ref, STORE) is not None


@pytest.mark.parametrize(
    "ref",
    [
        # Read as ../ by a server that cuts path parameters at ";" (Tomcat) or decodes twice.
        "https://images.example.com/claims/..;/admin/a.png",
        "https://images.example.com/claims/a.png;jsessionid=1",
        "https://images.example.com/claims/%252e%252e/admin/a.png",
        "https://images.example.com/claims/%252E%252E%252Fadmin",
        "https://images.example.com/claims/100%25.png",
    ],
)
def test_a_ref_a_server_may_read_as_another_path_is_refused(ref: str) -> None:
    assert ref_problem(ref, STORE) is not None
    with pytest.raises(ValueError, match="ref"):
        JobImage(format="png", ref=ref)


def test_a_ref_inside_the_allowlist_is_taken_and_no_store_means_none_is() -> None:
    assert ref_problem("https://IMAGES.example.com:443/claims/2026/a.png", STORE) is None
    assert "DECISIONS_IMAGE_STORES" in (ref_problem("https://images.example.com/a", []) or "")
    settings = Settings(_env_file=None, image_stores="https://s.example.com/imgs, http://h/x/")
    assert settings.image_stores == ["https://s.example.com/imgs/", "http://h/x/"]
    with pytest.raises(ValueError, match="image store"):
        Settings(_env_file=None, image_stores="https://user:pw@s.example.com/imgs")


def test_an_image_has_its_bytes_or_a_ref_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        JobImage(format="png")
    with pytest.raises(ValueError, match="exactly one"):
        JobImage(format="png", data_base64=png_b64(), ref="https://s/a.png")
    inline = JobImage(format="png", data_base64=png_b64())
    assert set(inline.shown()) == {"format", "data_base64"}


# --- the worker's fetch ---------------------------------------------------------------------


def _route_with(images: dict[str, Any], **fields: Any) -> Any:
    return parse_job(
        {
            "id": "r1",
            "kind": "route",
            "reply_to": "replies",
            "model": "faux-1",
            "state": {"invoice": "<a>"} if "b" not in images else {"invoice": "<a>", "x": "<b>"},
            "routes": {"pay": None, "hold": None},
            "images": images,
            **fields,
        }
    )


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("away.png", "redirect"),
        ("typed-wrong.png", "text/html"),
        ("not-png.png", "not a png"),
        ("missing.png", "404"),
    ],
)
def test_the_worker_refuses_a_ref_it_cannot_take_and_never_leaves_the_allowlist(
    stores: tuple[str, str, list[str]], path: str, why: str
) -> None:
    prefix, _, elsewhere_hits = stores
    settings = Settings(_env_file=None, image_stores=[prefix])
    job = _route_with({"a": {"format": "png", "ref": prefix + path}})
    with pytest.raises(JobInvalid) as info:
        asyncio.run(resolve_refs(job, settings))
    assert [p.field for p in info.value.problems] == ["images.a.ref"]
    assert why in info.value.problems[0].message
    assert elsewhere_hits == []


def test_the_worker_refetches_no_ref_outside_its_own_allowlist(
    stores: tuple[str, str, list[str]],
) -> None:
    """A job whose producer allowlisted more than the worker does: the worker's list counts."""
    _, other, elsewhere_hits = stores
    job = _route_with({"a": {"format": "png", "ref": f"{other}/imgs/a.png"}})
    with pytest.raises(JobInvalid, match="allowlisted"):
        asyncio.run(resolve_refs(job, Settings(_env_file=None, image_stores=[])))
    assert elsewhere_hits == []


def test_the_images_together_stay_within_the_state_limit(
    stores: tuple[str, str, list[str]],
) -> None:
    prefix, _, _ = stores
    settings = Settings(_env_file=None, image_stores=[prefix], max_state_bytes=len(PNG) + 10)
    job = _route_with(
        {
            "a": {"format": "png", "ref": prefix + "a.png"},
            "b": {"format": "png", "ref": prefix + "b.png"},
        }
    )
    with pytest.raises(JobInvalid) as info:
        asyncio.run(resolve_refs(job, settings))
    assert [p.field for p in info.value.problems] == ["images.b.ref"]
    assert "over" in info.value.problems[0].message


def test_the_client_refuses_a_ref_outside_the_allowlist_at_submit(tmp_path: Path) -> None:
    settings = settings_for(
        tmp_path, "http://127.0.0.1:9", image_stores=["https://s.example.com/i/"]
    )
    registry = ProviderRegistry.from_settings(settings)
    client = Client(settings, checker=judgment_checker(registry, lambda job: []))
    ok = {"a": {"format": "png", "ref": "https://s.example.com/i/a.png"}}
    off = {"a": {"format": "png", "ref": "https://elsewhere.example.com/i/a.png"}}
    nested = {"a": {"format": "png", "ref": "https://s.example.com/i/a.png"}}
    report = client.estimate(
        [
            _route_with(ok).model_dump(mode="json") | {"id": "ok"},
            _route_with(off).model_dump(mode="json") | {"id": "off"},
            _route_with(nested).model_dump(mode="json")
            | {"id": "nested", "state": {"a": {"b": "<a>"}}},
        ],
        store=False,
    )
    assert sorted(report.rejected) == ["nested", "off"]
    assert [p.field for p in report.rejected["off"]] == ["images.a.ref"]
    # Where the token stands is checked at submit with a stand-in: nothing is fetched.
    assert [p.field for p in report.rejected["nested"]] == ["state.a.b"]


def test_a_decide_job_with_a_ref_is_checked_at_submit_as_decisions_submit_checks_it(
    tmp_path: Path,
) -> None:
    """The checker ``decisions submit`` builds also prepares a plain decide job's request: a
    ref (no bytes before the worker fetches it) is checked with a stand-in, not an error."""
    settings = settings_for(
        tmp_path, "http://127.0.0.1:9", image_stores=["https://s.example.com/i/"]
    )
    registry = ProviderRegistry.from_settings(settings)
    checker = judgment_checker(
        registry, job_checker(registry, RuntimeRegistry.from_settings(settings))
    )
    client = Client(settings, checker=checker)
    ref = {"a": {"format": "png", "ref": "https://s.example.com/i/a.png"}}
    decide = {
        "kind": "decide",
        "reply_to": "replies",
        "provider": "openrouter",
        "questions": {"q": {"type": "noul", "instructions": "Is the parcel damaged?"}},
        "images": ref,
    }
    report = client.estimate(
        [
            {**decide, "id": "jev", "model": "typesafe/jev-1.14", "state": {"a": {"b": "<a>"}}},
            {**decide, "id": "other", "model": "faux-1", "state": {"photo": "<a>"}},
            {**decide, "id": "nested", "model": "faux-1", "state": {"a": {"b": "<a>"}}},
        ],
        store=False,
    )
    assert sorted(report.rejected) == ["nested"]
    assert [p.field for p in report.rejected["nested"]] == ["state.a.b"]


# --- through the worker, against the faux -----------------------------------------------------


def test_a_route_job_with_a_ref_sends_the_fetched_image(
    tmp_path: Path,
    stores: tuple[str, str, list[str]],
    faux: tuple[FauxServer, list[dict[str, Any]]],
) -> None:
    prefix, _, _ = stores
    server, seen = faux
    job = _route_with({"a": {"format": "png", "ref": prefix + "a.png"}}).model_dump(mode="json")
    settings = settings_for(tmp_path, server.url, image_stores=[prefix])
    run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=120)
    got = replies(tmp_path / "out")
    assert got["r1"]["type"] == "result", got
    assert [body["assets"]["a"]["data_base64"] for body in seen] == [png_b64(400, 300)]
    assert seen[0]["state"] == [{"image_fields": ["invoice"]}, "<a>"]


def test_a_sift_job_with_images_sends_each_request_its_own(
    tmp_path: Path, faux: tuple[FauxServer, list[dict[str, Any]]]
) -> None:
    """Jev reads a token in an item; each packed request carries the images its own items and
    the state reference, so no request has an unreferenced asset (a host's 400)."""
    server, seen = faux
    images = {
        "shelf": {"format": "png", "data_base64": png_b64(400, 300)},
        "p1": {"format": "png", "data_base64": png_b64(320, 300)},
        "p2": {"format": "png", "data_base64": png_b64(330, 300)},
    }
    # Long items, so that the request token limits split them into several packed requests.
    items = ["photo <p1>"] + [f"plain item {i} " + "word " * 400 for i in range(150)]
    items.append("photo <p2>")
    job = {
        "id": "sift-img",
        "kind": "sift",
        "reply_to": "replies",
        "model": "typesafe/jev-1.14",
        "state": {"shelf": "<shelf>"},
        "items": items,
        "question": {"instructions": "Is this product on the shelf?"},
        "images": images,
    }
    settings = settings_for(tmp_path, server.url)
    run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=120)
    got = replies(tmp_path / "out")
    assert got["sift-img"]["type"] in ("result", "escalation"), got
    assert len(seen) >= 2, "150 items should take more than one packed request"
    for body in seen:
        text = json.dumps(body["questions"])
        wanted = {"shelf"} | {k for k in ("p1", "p2") if f"<{k}>" in text}
        assert set(body["assets"]) == wanted
    assert [("p1" in body["assets"], "p2" in body["assets"]) for body in seen].count(
        (True, True)
    ) == 0


def test_a_sift_image_another_model_cannot_read_is_refused_naming_the_item(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9")
    registry = ProviderRegistry.from_settings(settings)
    client = Client(settings, checker=judgment_checker(registry, lambda job: []))
    base = {
        "kind": "sift",
        "reply_to": "replies",
        "model": "faux-1",
        "question": {"instructions": "Is this product on the shelf?"},
    }
    image = {"format": "png", "data_base64": png_b64()}
    report = client.estimate(
        [
            {**base, "id": "in-item", "items": ["a", "photo <p>"], "images": {"p": image}},
            {**base, "id": "state-ok", "items": ["a", "b"], "state": {"shelf": "<p>"},
             "images": {"p": image}},
            {**base, "id": "unused", "items": ["a"], "images": {"p": image}},
        ],
        store=False,
    )  # fmt: skip
    assert sorted(report.rejected) == ["in-item", "unused"]
    assert report.rejected["in-item"][0].field.startswith("items.1")
    assert [p.field for p in report.rejected["unused"]] == ["images.p"]


def test_an_inline_image_jobs_fingerprint_is_what_it_was_before_refs() -> None:
    """Taken at the commit before refs (``images: {i1: {format, data_base64}}``): a job
    stored then and submitted again now is the same job, not a conflict."""
    from hashlib import sha256

    from shared.fingerprint import job_fingerprint

    job = parse_job(
        {
            "id": "fp",
            "reply_to": "r",
            "state": {"a": "<i1>"},
            "questions": {"q": {"type": "noul", "instructions": "?"}},
            "images": {"i1": {"format": "png", "data_base64": base64.b64encode(PNG).decode()}},
        }
    )
    assert job_fingerprint(job) == FINGERPRINT_BEFORE_REFS, sha256(PNG).hexdigest()
