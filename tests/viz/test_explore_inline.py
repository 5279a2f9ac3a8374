"""``attnkit.viz.explore(model, text)`` in a notebook: the page in an iframe with its data embedded (no server),
which renders in Chromium without fetching anything."""

from __future__ import annotations

import html
import sys
from pathlib import Path

import pytest
from explore_helpers import browser

import attnkit.viz
from attnkit.interop import load_pretrained

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model


def test_the_inline_view_embeds_the_page_and_opens_offline(tmp_path: Path):
    model = load_pretrained(build_chat_model(tmp_path / "m"))
    view = attnkit.viz.explore(model, "The old owl", layer=1, head=2, view="matrix", steps=2)
    frame = view._repr_html_()
    assert frame.startswith("<iframe") and 'srcdoc="' in frame
    page = html.unescape(frame.split('srcdoc="', 1)[1].split('" style=', 1)[0])
    assert page == view.html() and "<script src=" not in page and '<link rel="stylesheet"' not in page
    saved = view.save(tmp_path / "view.html")
    with browser() as chromium:
        tab = chromium.new_page()
        errors: list[str] = []
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        tab.goto(saved.as_uri())
        tab.wait_for_function("Number(document.body.dataset.version) > 0")
        assert "layer 2, head 3" in tab.inner_text("#title")
        assert tab.locator("#matrix-canvas").count() == 1
        assert tab.is_disabled("#step") and tab.get_attribute("#text", "readonly") is not None
        assert tab.evaluate("window.exploreData().input.steps") == 2
        tab.set_content(frame)  # the notebook's iframe itself
        inner = tab.frames[1]
        inner.wait_for_function("Number(document.body.dataset.version) > 0")
        assert "layer 2, head 3" in inner.inner_text("#title")
        assert errors == []
    with pytest.raises(ValueError, match="head must be an int in"):
        attnkit.viz.explore(model, "x", head=4)
    with pytest.raises(ValueError, match="view must be"):
        attnkit.viz.explore(model, "x", view="grid")
