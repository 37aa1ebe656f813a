"""Untrusted states shown safely: pretty text, and only images whose bytes prove their format."""

from __future__ import annotations

import base64
import io
import json

from PIL import Image

from worker.console.state_view import MAX_IMAGES, pretty_json, state_images


def png(width: int = 4, height: int = 3) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def data_url(raw: bytes, fmt: str = "png") -> str:
    return f"data:image/{fmt};base64,{base64.b64encode(raw).decode()}"


def test_images_in_the_state_are_found_with_their_path() -> None:
    raw = png()
    state = {"photos": [{"front": data_url(raw)}], "note": "hello"}
    images = state_images(state)
    assert [(i.where, i.size_bytes) for i in images] == [("state.photos[0].front", len(raw))]
    assert base64.b64decode(images[0].src.split(",", 1)[1]) == raw


def test_only_raster_images_whose_bytes_match_are_shown() -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'
    state = [
        data_url(svg, "svg+xml"),  # SVG can carry script: never shown
        data_url(b"<html>not a png</html>"),  # says png, is not
        'data:image/png;base64,iVBOR" onerror="alert(1)',  # not base64
        "data:text/html;base64,PHNjcmlwdD4=",
    ]
    assert state_images(state) == []


def test_asset_tokens_show_the_assets_the_escalation_carries() -> None:
    raw = png()
    encoded = base64.b64encode(raw).decode()
    assets = {"i1": {"type": "image", "format": "png", "data_base64": encoded}}
    images = state_images(["Look at <i1> and <nope>"], assets)
    assert [(i.where, i.size_bytes) for i in images] == [("<i1>", len(raw))]
    assert state_images(["Look at <i1>"]) == []


def test_a_token_in_a_question_shows_its_image_and_each_asset_shows_once() -> None:
    """Jev reads a token in a question: the reviewer answering it must see that image too."""
    encoded = base64.b64encode(png()).decode()
    assets = {k: {"format": "png", "data_base64": encoded} for k in ("s1", "q1")}
    questions = {"m": {"type": "noul", "instructions": "Does <q1> show the parcel in <s1>?"}}
    images = state_images({"photo": "<s1>", "again": "<s1>"}, assets, questions)
    assert [i.where for i in images] == ["<s1>", "<q1>"]


def test_an_image_kept_in_a_store_is_shown_by_its_ref_never_loaded() -> None:
    ref = "https://images.example.com/claims/a.png"
    [image] = state_images({"photo": "<p>"}, {"p": {"format": "png", "ref": ref}})
    assert (image.where, image.ref, image.src) == ("<p>", ref, "")


def test_at_most_so_many_images() -> None:
    state = [data_url(png())] * (MAX_IMAGES + 5)
    assert len(state_images(state)) == MAX_IMAGES


def test_pretty_json_shortens_data_urls_and_keeps_everything_else() -> None:
    long_url = data_url(png(64, 64))
    text = pretty_json({"img": long_url, "body": "<script>x</script>", "n": [1, 2]})
    shown = json.loads(text)
    assert shown["body"] == "<script>x</script>" and shown["n"] == [1, 2]
    assert shown["img"].startswith("data:image/png;base64,… (") and long_url not in text
