"""``attnkit explore`` on the task runs: translate's payload (cross-attention, greedy and beam hypotheses with
their scores), and in a real browser (Playwright driving Debian's Chromium) a tiny classify, anomaly and
translate run: typing updates the task's panel and the attention views, hovering highlights a token's lines,
the head changes; no console error and no request off 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from explore_helpers import Watch, browser, explore_server, wait_for

import attnkit
from attnkit.tasks import load_run
from attnkit.tasks.translate import translate_scored
from attnkit.viz.explorer import RunExplorer, load_explorer
from attnkit.viz.explorer.payload import unpack_attention

FAST = {"trainer.threads": 1, "trainer.progress_bar": False}


@pytest.fixture(scope="module")
def translate_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The translate task on 600 built-in pairs, one epoch of a 1-layer model, beam size 2."""
    overrides = {
        "data.num_pairs": 600, "data.max_len": 16, "model.d_model": 32, "model.dim_feedforward": 64,
        "model.num_layers": 1, "trainer.max_epochs": 1, "trainer.batch_size": 64, "optim.warmup": 5,
        "decode.beam_size": 2, "decode.max_len": 12,
    }  # fmt: skip
    out = tmp_path_factory.mktemp("runs")
    return attnkit.train("translate", output_dir=str(out), name="tiny", **FAST, **overrides).run_dir


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as shared:
        yield shared


def test_translate_view_has_cross_attention_and_scored_hypotheses(translate_run: Path):
    explorer = load_explorer(translate_run)
    assert isinstance(explorer, RunExplorer) and explorer.kind == "translate"
    view = explorer.view("twenty one")
    [block] = view["blocks"]
    assert block["name"] == "cross-attention" and block["query_axis"] != block["key_axis"]
    maps = unpack_attention(block)
    assert maps.shape == (block["layers"], block["heads"], len(block["queries"]), len(block["keys"]))
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=len(block["keys"]) / 255)  # rows over the source
    module = load_run(translate_run).module
    assert [h["beam_size"] for h in view["hypotheses"]] == [1, 4]
    for hypothesis in view["hypotheses"]:
        [(text, score)] = translate_scored(module, ["twenty one"], beam_size=hypothesis["beam_size"])
        assert hypothesis["text"] == text and hypothesis["log_prob"] == pytest.approx(score) and score < 0
    one = explorer.view("twenty one", layer=0)["blocks"][0]
    np.testing.assert_array_equal(unpack_attention(one)[0], maps[0])
    with pytest.raises(ValueError, match="type an input"):
        explorer.view(" ")


def open_page(chromium: Any, url: str, text: str) -> tuple[Any, Watch, dict[str, Any]]:
    page = chromium.new_page(viewport={"width": 1200, "height": 800})
    watch = Watch(page)
    page.goto(url)
    version = int(page.wait_for_function("Number(document.body.dataset.version)").json_value())
    page.fill("#text", text)
    wait_for(page, text, version)
    return page, watch, page.evaluate("window.exploreData()")


def hover_highlights(page: Any) -> None:
    """Hovering the first query token highlights exactly its drawn lines."""
    page.hover('#head-svg text.tok[data-side="q"][data-i="0"]')
    highlighted = page.eval_on_selector_all("#head-svg line.attn.hl", "ls => ls.map(l => l.dataset.q)")
    assert set(highlighted) == {"0"} and len(highlighted) == page.locator('#head-svg line.attn[data-q="0"]').count()


def bars(page: Any) -> list[tuple[str, float]]:
    """The task panel's rows: (name, probability)."""
    cells = "rs => rs.map(r => [r.cells[0].innerText, r.cells[2].innerText])"
    rows = page.eval_on_selector_all("#task-panel tr", cells)
    return [(name, float(p.rstrip(" %")) / 100) for name, p in rows]


def test_explore_a_classify_run(classify_run: Path, chromium: Any, tmp_path: Path):
    with explore_server(classify_run, tmp_path / "log") as url:
        page, watch, data = open_page(chromium, url, "a dull and boring film")
        classes = data["classes"]
        panel = page.inner_text("#task-panel")
        assert f"Class: {classes['names'][classes['predicted']]}" in panel
        assert f"({classes['pooling']} pooling)" in panel
        rows = bars(page)
        shown = dict(rows[: len(classes["names"])])
        np.testing.assert_allclose([shown[n] for n in classes["names"]], classes["probabilities"], atol=6e-4)
        keys = data["blocks"][0]["keys"]
        assert [name for name, _ in rows[len(classes["names"]) :]] == keys  # the pooled attention over the words
        hover_highlights(page)
        page.select_option("#head", index=1)
        assert "layer 1, head 2" in page.inner_text("#task-panel")
        pooled = [p for _, p in bars(page)[len(classes["names"]) :]]
        np.testing.assert_allclose(pooled, classes["pooled_attention"][0][1], atol=6e-4)
        watch.check((url,))
        page.close()


def test_explore_an_anomaly_run(anomaly_run: Path, chromium: Any, tmp_path: Path):
    with explore_server(anomaly_run, tmp_path / "log") as url:
        page, watch, data = open_page(chromium, url, "3")
        items = data["items"]
        assert len(items["probabilities"]) == 10 == len(data["blocks"][0]["keys"])
        assert f"Odd one out: item {items['predicted']}" in page.inner_text("#task-panel")
        assert page.inner_text("#task-panel tr.picked").startswith(f"item {items['predicted']}")
        assert page.locator("#head-svg text.tok").count() == 20  # the 10 items, as queries and as keys
        hover_highlights(page)
        page.select_option("#layer", index=1)
        page.wait_for_function("window.exploreData().blocks[0].only_layer === 1")
        page.click('button[data-view="matrix"]')
        assert page.locator("#matrix-canvas").count() == 1
        watch.check((url,))
        page.close()


def test_explore_a_translate_run(translate_run: Path, chromium: Any, tmp_path: Path):
    module = load_run(translate_run).module
    with explore_server(translate_run, tmp_path / "log") as url:
        page, watch, data = open_page(chromium, url, "thirty two")
        [block] = data["blocks"]
        assert block["name"] == "cross-attention" and "cross-attention" in page.inner_text("#title")
        assert page.locator("#head-svg text.tok[data-side='k']").count() == len(block["keys"])
        rows = page.eval_on_selector_all("#task-panel tr", "rs => rs.map(r => Array.from(r.cells, c => c.innerText))")
        assert [r[0] for r in rows] == ["beam 1", "beam 4"]
        for (_, text, score), size in zip(rows, (1, 4)):
            [(want, want_score)] = translate_scored(module, ["thirty two"], beam_size=size)
            assert text == want.strip() and float(score) == pytest.approx(want_score, abs=1e-3)  # innerText trims
        hover_highlights(page)
        watch.check((url,))
        page.close()
