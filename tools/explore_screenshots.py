"""Regenerate the screenshots of ``attnkit explore`` on the docs site (docs/images/explore-*.png).

Run::

    OMP_NUM_THREADS=1 .venv/bin/python tools/explore_screenshots.py              # into docs/images
    OMP_NUM_THREADS=1 .venv/bin/python tools/explore_screenshots.py --out /tmp/shots --lm-run runs/lm/x

It trains (in a temporary folder, about a minute on one core) a small word-level lm run on attnkit's
grammar corpus, as the language-model tutorial does, and a tiny anomaly run (or reuses ``--lm-run`` /
``--anomaly-run``), starts ``attnkit explore RUN --port 0 --no-browser`` on each (127.0.0.1), and takes the
pictures with Playwright driving Debian's Chromium, every request off 127.0.0.1 refused:

- ``explore-head.png``: the lm run's head view, a token hovered, after 4 generated tokens, the next-token
  table beside it;
- ``explore-model.png``: its model view (every layer x head);
- ``explore-matrix.png``: its matrix of the last layer;
- ``explore-anomaly.png``: the anomaly run's set, with the predicted odd item.

Exits 1 when a page shows a script error or asks for something off 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
from check_site import CHROMIUM_ARGS, find_chromium  # noqa: E402  (the docs check's browser flags)

VIEWPORT = {"width": 1180, "height": 720}


def train_lm(workdir: Path) -> Path:
    import attnkit
    from attnkit.data.generators.grammar import generate_grammar_corpus

    corpus = workdir / "corpus.txt"
    corpus.write_text("\n\n".join(generate_grammar_corpus(3000, seed=1)) + "\n", encoding="utf-8")
    result = attnkit.train(
        "lm",
        output_dir=str(workdir),
        name="lm",
        seed=0,
        data={"source": str(corpus), "tokenizer": "word", "cache_dir": str(workdir / "cache")},
        model={"d_model": 64, "num_layers": 2, "num_heads": 4, "dim_feedforward": 256, "max_len": 64},
        optim={"lr": 5e-3, "warmup": 20},
        trainer={"max_epochs": 3, "batch_size": 8, "progress_bar": False, "threads": 1, "report": False},
    )
    return Path(result.run_dir)


def train_anomaly(workdir: Path) -> Path:
    import attnkit

    result = attnkit.train(
        "anomaly",
        output_dir=str(workdir),
        name="anomaly",
        seed=42,
        data={"test_sets": 100},
        model={"d_model": 64, "dim_feedforward": 128},
        optim={"lr": 1e-3},
        trainer={"max_epochs": 10, "progress_bar": False, "threads": 1, "report": False},
    )
    return Path(result.run_dir)


@contextmanager
def explore_server(run: Path) -> Iterator[str]:
    """``attnkit explore RUN --port 0 --no-browser`` while the block runs; yields its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnkit", "explore", str(run), "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = lines.get(timeout=120)
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if match is None:
            raise SystemExit(f"attnkit explore did not report its URL: {line!r}")
        yield match.group(0)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


class Page:
    """A page of ``url`` whose script errors and requests off 127.0.0.1 are collected as problems."""

    def __init__(self, browser: Any, url: str, problems: list[str]) -> None:
        self.page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        self.page.on("pageerror", lambda e: problems.append(f"{url}: script error {e}"))
        self.page.on("console", lambda m: problems.append(f"{url}: {m.text}") if m.type == "error" else None)

        def route(r: Any) -> None:
            if r.request.url.startswith(url):
                r.continue_()
            else:
                problems.append(f"{url}: asked for {r.request.url}")
                r.abort()

        self.page.route("**/*", route)
        self.page.goto(url)
        self.page.wait_for_function("Number(document.body.dataset.version) > 0")

    def type(self, text: str) -> None:
        """Type ``text`` as the input and wait for its views."""
        version = int(self.page.evaluate("document.body.dataset.version"))
        self.page.fill("#text", text)
        self.page.wait_for_function(
            "([t, v]) => document.body.dataset.text === t && Number(document.body.dataset.version) > v",
            arg=[text, version],
        )


def shoot_lm(browser: Any, url: str, out: Path, problems: list[str]) -> None:
    p = Page(browser, url, problems)
    p.type("The old dogs that the cat sees")
    for step in range(1, 5):
        if p.page.is_disabled("#step"):
            break
        p.page.click("#step")
        p.page.wait_for_function(f"window.exploreData().input.steps === {step}")
    p.page.select_option("#layer", index=1)
    p.page.wait_for_function("window.exploreData().blocks[0].only_layer === 1")
    p.page.eval_on_selector("#temperature", "(s) => { s.value = '7'; s.dispatchEvent(new Event('input')); }")  # t = 1
    p.page.hover('#head-svg text.tok[data-side="q"][data-i="4"]')
    p.page.screenshot(path=str(out / "explore-head.png"))
    print(f"wrote {out / 'explore-head.png'}")
    p.page.mouse.move(0, 0)
    p.page.click('button[data-view="matrix"]')
    p.page.wait_for_selector("#matrix-canvas")
    p.page.screenshot(path=str(out / "explore-matrix.png"))
    print(f"wrote {out / 'explore-matrix.png'}")
    p.page.click('button[data-view="model"]')
    p.page.wait_for_function("document.querySelectorAll('#view-model canvas').length === 8")
    p.page.hover("#view-model .strip span:nth-child(3)")
    p.page.screenshot(path=str(out / "explore-model.png"))
    print(f"wrote {out / 'explore-model.png'}")
    p.page.close()


def shoot_anomaly(browser: Any, url: str, out: Path, problems: list[str]) -> None:
    p = Page(browser, url, problems)
    for index in range(100):  # the first test set the run gets right
        p.type(str(index))
        items = p.page.evaluate("window.exploreData().items")
        if items["predicted"] == items["target"]:
            break
    p.page.select_option("#layer", index=1)
    p.page.wait_for_function("window.exploreData().blocks[0].only_layer === 1")
    p.page.click('button[data-view="matrix"]')
    p.page.wait_for_selector("#matrix-canvas")
    p.page.screenshot(path=str(out / "explore-anomaly.png"))
    print(f"wrote {out / 'explore-anomaly.png'}")
    p.page.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--lm-run", type=Path, help="an lm run to show (default: train a small one)")
    parser.add_argument("--anomaly-run", type=Path, help="an anomaly run to show (default: train a tiny one)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("no Chromium on PATH (Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="attnkit-shots-") as tmp:
        lm_run = args.lm_run or train_lm(Path(tmp))
        anomaly_run = args.anomaly_run or train_anomaly(Path(tmp))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                with explore_server(lm_run) as url:
                    shoot_lm(browser, url, args.out, problems)
                with explore_server(anomaly_run) as url:
                    shoot_anomaly(browser, url, args.out, problems)
            finally:
                browser.close()
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
