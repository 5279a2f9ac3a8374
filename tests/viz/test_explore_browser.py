"""``attnkit explore`` in a real browser (Playwright driving Debian's Chromium), on a small trained lm run and
a small random imported Llama: typing updates the views, hovering highlights a token's lines, layer and
head change, stepping generates what ``generate`` does, the temperature slider re-weights the next-token
table, "Save" writes a page that opens offline with the same view; no console error and no request off
127.0.0.1."""

from __future__ import annotations

import io
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from explore_helpers import Watch, browser, explore_server, wait_for
from matplotlib import image as mpimg

import attnkit
from attnkit.interop import load_pretrained
from attnkit.tasks import load_model
from attnkit.viz.explorer.payload import table_probabilities

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model

FAST = {"trainer.threads": 1, "trainer.progress_bar": False}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    docs = [f"the cat number {i} sat on the mat.\nit was {'happy' if i % 2 else 'sad'}." for i in range(60)]
    (out / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    overrides = {
        "data.source": str(out / "corpus.txt"), "data.val_fraction": 0.1, "data.test_fraction": 0.1,
        "model.d_model": 32, "model.num_layers": 2, "model.num_heads": 2, "model.dim_feedforward": 64,
        "model.max_len": 48, "trainer.batch_size": 8, "trainer.max_epochs": 2, "optim.warmup": 5,
        "trainer.snapshot_every_n_steps": 5,
    }  # fmt: skip
    return attnkit.train("lm", output_dir=str(out), name="c", **FAST, **overrides).run_dir


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("llama") / "m")


def post(url: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url + "api/view", data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def explore_decoder(url: str, tmp_path: Path, generate_ids: Any, layers: int, heads: int) -> None:
    with browser() as chromium:
        context = chromium.new_context(accept_downloads=True, viewport={"width": 1200, "height": 800})
        page = context.new_page()
        watch = Watch(page)
        page.goto(url)
        page.wait_for_function("Number(document.body.dataset.version) > 0")  # the example input's views
        version = int(page.evaluate("document.body.dataset.version"))
        text = "the cat sat"
        page.fill("#text", text)
        version = wait_for(page, text, version)
        data = page.evaluate("window.exploreData()")
        assert data["input"]["text"] == text and len(data["tokens"]) >= 3
        # the page asks for what it shows: the layer of the head view, the next-token row of the last token
        assert data["blocks"][0]["only_layer"] == 0 and data["next"]["positions"] == [len(data["tokens"]) - 1]
        assert data["server_ms"] > 0 and re.search(r"updated in \d+ ms \(server \d+ ms\)", page.inner_text("#status"))
        # head view: lines; hovering the last query token highlights its lines only
        lines = page.locator("#head-svg line.attn")
        assert lines.count() >= len(data["tokens"])
        last = len(data["tokens"]) - 1
        page.hover(f'#head-svg text.tok[data-side="q"][data-i="{last}"]')
        highlighted = page.eval_on_selector_all("#head-svg line.attn.hl", "ls => ls.map(l => l.dataset.q)")
        drawn = page.locator(f'#head-svg line.attn[data-q="{last}"]').count()
        assert set(highlighted) == {str(last)} and len(highlighted) == drawn > 1
        page.hover('#head-svg text.tok[data-side="k"][data-i="0"]')  # a key: the lines that reach it
        highlighted = page.eval_on_selector_all("#head-svg line.attn.hl", "ls => ls.map(l => l.dataset.k)")
        assert set(highlighted) == {"0"} and len(highlighted) == page.locator('#head-svg line.attn[data-k="0"]').count()
        # layer and head
        page.select_option("#layer", index=layers - 1)
        page.wait_for_function(f"window.exploreData().blocks[0].only_layer === {layers - 1}")
        page.select_option("#head", index=heads - 1)
        assert f"layer {layers}, head {heads}" in page.inner_text("#title")
        assert page.locator("#head-svg line.attn").count() >= len(data["tokens"])
        assert f"layer={layers - 1}" in page.url and f"head={heads - 1}" in page.url and "text=the+cat+sat" in page.url
        # the next-token table re-weights with the temperature slider, as the payload says
        temps = data["next"]["temperatures"]
        page.eval_on_selector(
            "#temperature", f"(s) => {{ s.value = '{temps.index(1.0)}'; s.dispatchEvent(new Event('input')); }}"
        )
        shown = [float(t.rstrip(" %")) / 100 for t in page.locator("#next-table .prob").all_inner_texts()]
        want = table_probabilities(data["next"], last, 1.0)
        np.testing.assert_allclose(shown, want, atol=0.0006)
        # generation, step by step, equals generate's greedy tokens; back undoes a step
        for step in range(1, 4):
            if page.is_disabled("#step"):
                break
            page.click("#step")
            page.wait_for_function(f"window.exploreData().input.steps === {step}")
        data = page.evaluate("window.exploreData()")
        new = data["ids"][data["prompt_length"] :]
        assert new == generate_ids(text, len(new)) and len(new) >= 1
        page.click("#back")
        page.wait_for_function(f"window.exploreData().input.steps === {data['input']['steps'] - 1}")
        assert page.evaluate("window.exploreData()")["ids"] == data["ids"][:-1]
        # model view: every head
        page.click('button[data-view="model"]')  # every layer: asked for now
        page.wait_for_function(f"document.querySelectorAll('#view-model canvas').length === {layers * heads}")
        assert page.evaluate("window.exploreData().blocks[0].only_layer") is None
        page.click('button[data-view="matrix"]')
        assert page.locator("#matrix-canvas").count() == 1
        shot = mpimg.imread(io.BytesIO(page.screenshot()), format="png")
        assert shot.std() > 0.05  # not blank
        # Save: one file that opens offline with the same view
        with page.expect_download() as download:
            page.click("#save")
        saved = tmp_path / "view.html"
        download.value.save_as(saved)
        watch.check((url,))
        offline = context.new_page()
        offline_watch = Watch(offline)
        offline.route(
            "**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort()
        )
        offline.goto(saved.as_uri())
        wait_for(offline, text)
        assert offline.inner_text("#title") == page.inner_text("#title")
        assert offline.evaluate("window.exploreData().ids") == page.evaluate("window.exploreData().ids")
        assert offline.locator("#matrix-canvas").count() == 1
        offline_watch.check(("file:",))
        context.close()


def post_to(url: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def explore_deeper(url: str, layers: int, heads: int) -> None:
    """The next-token panel opens at temperature 1; the logit lens, attribution (a head switched off with a click)
    and patching views show what their endpoints answer; no console error."""
    text, corrupted = "The old owl sat on the", "The old cat sat on the"
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": 1200, "height": 800})
        watch = Watch(page)
        page.goto(url + "?text=" + urllib.parse.quote(text))
        wait_for(page, text)
        data = page.evaluate("window.exploreData()")
        last = len(data["tokens"]) - 1
        assert page.inner_text("#temperature-value") == "1"  # the model's own distribution, not greedy
        shown = [float(t.rstrip(" %")) / 100 for t in page.locator("#next-table .prob").all_inner_texts()]
        np.testing.assert_allclose(shown, table_probabilities(data["next"], last, 1.0), atol=0.0006)
        # the logit lens: (layers + 1) x positions cells, the endpoint's top tokens
        page.click('button[data-view="lens"]')
        page.wait_for_function(
            f"document.querySelectorAll('#lens-table td.lens-cell').length === {(layers + 1) * (last + 1)}"
        )
        lens = post_to(url, "api/lens", {"text": text})
        cells = page.eval_on_selector_all(
            "#lens-table td.lens-cell", "cs => cs.map(c => [c.textContent, Number(c.dataset.p)])"
        )
        assert [c[0] for c in cells] == [t for row in lens["top_tokens"] for t in row]
        assert [c[1] for c in cells] == [p for row in lens["top_probs"] for p in row]
        # attribution: a bar per head; a click switches a head off and the next-token table changes
        page.click('button[data-view="attribution"]')
        page.wait_for_function(f"document.querySelectorAll('.head-switch').length === {layers * heads}")
        page.wait_for_selector("#ablation table")
        page.click('.head-switch[data-layer="1"][data-head="0"]')
        page.wait_for_function("document.querySelector('#ablation h3').textContent.includes('L2H1 off')")
        page.wait_for_selector("#ablation table")
        ablation = post_to(url, "api/ablation", {"text": text, "heads": [[1, 0]]})
        off = [float(t.rstrip(" %")) / 100 for t in page.locator("#ablation .prob-off").all_inner_texts()]
        np.testing.assert_allclose(off, ablation["ablated_of_base"], atol=0.0006)
        assert page.locator(".head-switch.off").count() == 1
        page.click("#heads-on")
        page.wait_for_function("!document.querySelector('#ablation h3').textContent.includes('L2H1')")
        # patching: a corrupted text typed, a layer x position heat map
        page.click('button[data-view="patching"]')
        page.fill("#corrupted", corrupted)
        page.click("#patch")
        page.wait_for_function(
            f"document.querySelectorAll('#patching-table td.patch-cell').length === {layers * (last + 1)}"
        )
        patch = post_to(url, "api/patching", {"clean": text, "corrupted": corrupted})
        scores = page.eval_on_selector_all(
            "#patching-table td.patch-cell", "cs => cs.map(c => Number(c.dataset.score))"
        )
        assert scores == [v for row in patch["scores"] for v in row]
        watch.check((url,))


def explore_timeline(url: str, run: Path) -> None:
    """A run with weight snapshots: the slider over them shows each snapshot's weights (its step in the view's
    input, its next-token table), the lens follows it, and its last place gives the trained weights back."""
    from attnkit.training.snapshots import read_snapshot_index

    steps = [e["step"] for e in read_snapshot_index(run)]
    assert len(steps) >= 2
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": 1200, "height": 800})
        watch = Watch(page)
        page.goto(url + "?text=the+cat")
        wait_for(page, "the cat")
        trained = page.evaluate("window.exploreData()")
        assert trained["input"]["snapshot"] is None and page.is_visible("#timeline")
        assert page.inner_text("#snapshot-value") == "trained"
        slide = "(s, v) => { s.value = String(v); s.dispatchEvent(new Event('input')); }"
        page.eval_on_selector("#snapshot", slide, 0)
        page.wait_for_function("window.exploreData().input.snapshot === 0")
        first = page.evaluate("window.exploreData()")
        assert first["next"]["logits"] != trained["next"]["logits"] and page.inner_text("#snapshot-value").startswith(
            "0"
        )
        page.click('button[data-view="lens"]')
        page.wait_for_selector("#lens-table td.lens-cell")
        lens = post_to(url, "api/lens", {"text": "the cat", "snapshot": 0})
        shown = page.eval_on_selector_all("#lens-table td.lens-cell", "cs => cs.map(c => c.textContent)")
        assert shown == [t for row in lens["top_tokens"] for t in row]
        page.eval_on_selector("#snapshot", slide, len(steps))  # the last place: the trained weights
        page.wait_for_function("window.exploreData().input.snapshot === null")
        assert page.evaluate("window.exploreData()")["next"] == trained["next"]
        watch.check((url,))


def test_explore_a_trained_lm_run(lm_run: Path, tmp_path: Path):
    pretrained = load_model(lm_run)

    def generate_ids(text: str, n: int) -> list[int]:
        prompt = pretrained.encode_prompt(text)
        out = pretrained.model.generate(torch.tensor([prompt]), n, temperature=0.0, stop_ids=pretrained.eos_ids)
        return out[0, len(prompt) :].tolist()

    with explore_server(lm_run, tmp_path / "log") as url:
        explore_decoder(url, tmp_path, generate_ids, layers=2, heads=2)
        explore_timeline(url, lm_run)


def test_explore_an_imported_llama(llama: Path, tmp_path: Path):
    pretrained = load_pretrained(llama)

    def generate_ids(text: str, n: int) -> list[int]:
        ids = pretrained.encode_prompt(text)
        tokens = pretrained.model.generate(torch.tensor([ids]), n, temperature=0.0, stop_ids=pretrained.eos_ids)
        assert pretrained.decode(tokens[0, len(ids) :].tolist()) == pretrained.generate(text, n)
        return tokens[0, len(ids) :].tolist()

    with explore_server(llama, tmp_path / "log") as url:
        # bad inputs: a clear 400, and the server keeps serving
        for body, message in (
            ({"text": "x", "steps": -1}, "steps must be an int"),
            ({"txt": "x"}, "unknown field"),
            ({"text": "owl " * 400}, "context of 128 tokens"),
            ([1, 2], "must be a JSON object"),
        ):
            status, answer = post(url, body)
            assert status == 400 and message in answer["detail"], answer
        status, answer = post(url, {"text": "The old owl", "steps": 2})
        assert status == 200 and len(answer["ids"]) == len(pretrained.encode_prompt("The old owl")) + 2
        explore_decoder(url, tmp_path, generate_ids, layers=2, heads=4)
        explore_deeper(url, layers=2, heads=4)
