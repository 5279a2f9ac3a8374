"""Benchmark: ``attnkit explore``'s update (an input typed -> the views redrawn in the browser) against the
model's own forward pass with attention weights on the same input, side by side.

Run::

    .venv/bin/python benchmarks/explore.py            # the two models of issue 24, 8 paired rounds
    .venv/bin/python benchmarks/explore.py --quick    # tiny models: a smoke test
    .venv/bin/python benchmarks/explore.py --json out.json

The models (random weights, float32, nothing downloaded; latency does not depend on training), with a
byte-level BPE tokenizer (512 tokens) trained here on generated text:

* **lm**: the lm task's default architecture (d_model 128, 4 heads, 3 layers, feed-forward 512), its
  context raised from 64 to 160 so that it reads 128 tokens.
* **135M**: a Llama-family shape of 135M parameters (SmolLM2-135M's: d_model 576, 30 layers x 9 heads,
  3 key-value heads, SwiGLU 1536, vocabulary 49152, tied embeddings).

Each round types a new input of 128 tokens into the page (Playwright driving Debian's Chromium; the
explorer app served by uvicorn in this process on 127.0.0.1) and takes the time from the input event to
the views redrawn (the page's own clock: request, model, payload, JSON, unpacking, drawing; the page is on
the head view, so it asks for the layer it shows and the next-token row of the last position), then times
``model.forward_with_attention`` on the same ids (the reference), then opens the model view (every layer x
head: the page asks for all layers of the same input; no forward pass) and goes back to the head view.
Reported: p50 / p95 of both, the ratio per round and how many rounds meet the goal, the bytes of each
update's payload, and the time (Playwright's clock: click to drawn grid) and bytes of the model view.

Checks (exit status 1 when one fails): every update shows the typed input, and its payload and the model
view's are at most 1 MB. Goals (printed PASS / FAIL; ``--strict`` makes a FAIL exit 1 too): p95 <= 300 ms
for lm; for 135M the update's p95 <= 1.3x the forward's p95. The machine's load is printed beside the
figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from attnkit.text.tokenizers import build_tokenizer
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.text.tokenizers import build_tokenizer
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
from check_site import CHROMIUM_ARGS, find_chromium  # the docs check's browser flags

from attnkit.interop import Pretrained
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.viz.explorer import DecoderExplorer
from attnkit.viz.explorer.app import create_explore_app
from encoder_block import loadavg

MB = 1_000_000
LM_GOAL_MS, RATIO_GOAL = 300.0, 1.3
WORDS = ["owl", "moon", "river", "stone", "quiet", "night", "over", "the", "and", "light", "cold", "sat", "on"]
SHAPES = {
    "lm": dict(d_model=128, num_layers=3, num_heads=4, dim_feedforward=512, max_len=160, positional="learned"),
    "135M": dict(
        preset="llama",
        d_model=576,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        dim_feedforward=1536,
        vocab_size=49152,
        max_len=2048,
        tie_weights=True,
    ),
    "lm-quick": dict(d_model=32, num_layers=2, num_heads=2, dim_feedforward=64, max_len=160),
    "135M-quick": dict(
        preset="llama",
        d_model=36,
        num_layers=3,
        num_heads=9,
        num_kv_heads=3,
        dim_feedforward=64,
        vocab_size=4096,
        max_len=256,
    ),
}


def build(shape: str, tokenizer: Any) -> tuple[DecoderExplorer, LanguageModel]:
    fields: dict[str, Any] = {"vocab_size": tokenizer.vocab_size, "dropout": 0.0, **SHAPES[shape]}
    fields.update(pad_id=tokenizer.pad_id or 0, bos_id=tokenizer.bos_id or 0, eos_id=tokenizer.eos_id or 0)
    torch.manual_seed(0)
    model = LanguageModel(LanguageModelConfig.model_validate(fields)).eval()
    return DecoderExplorer(Pretrained(model, "lm", tokenizer, Path(shape))), model


def texts_of(tokenizer: Any, explorer: DecoderExplorer, rounds: int, length: int) -> list[str]:
    """``rounds`` different inputs whose prompts are ``length`` tokens."""
    rng = random.Random(0)
    out: list[str] = []
    while len(out) < rounds:
        text = " ".join(rng.choice(WORDS) for _ in range(length))
        ids = explorer.pretrained.encode_prompt(text)[:length]
        text = tokenizer.decode(ids)
        if len(explorer.pretrained.encode_prompt(text)) == length and text not in out:
            out.append(text)
    return out


class AppThread:
    """The explorer app on 127.0.0.1 (a free port) in a thread of this process."""

    def __init__(self, explorer: DecoderExplorer) -> None:
        import uvicorn

        self.server = uvicorn.Server(
            uvicorn.Config(create_explore_app(explorer), host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def measure(shape: str, tokenizer: Any, browser: Any, rounds: int, length: int) -> dict[str, Any]:
    explorer, model = build(shape, tokenizer)
    texts = texts_of(tokenizer, explorer, rounds + 1, length)
    params = sum(p.numel() for p in model.parameters())
    updates, servers, forwards, sizes, grids, grid_sizes, problems = [], [], [], [], [], [], []
    cells = model.config.num_layers * model.config.num_heads
    with AppThread(explorer) as url:
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(url)
        page.wait_for_function("Number(document.body.dataset.version) > 0")
        for i, text in enumerate(texts):
            page.fill("#text", text)
            page.wait_for_function("(t) => document.body.dataset.text === t", arg=text, timeout=120_000)
            update_ms = page.evaluate("window.exploreTimings[window.exploreTimings.length - 1]")
            size = page.evaluate("window.exploreData().bytes")
            server_ms = page.evaluate("window.exploreData().server_ms")
            shown = page.evaluate("window.exploreData().tokens.length")
            ids = torch.tensor([explorer.pretrained.encode_prompt(text)])
            start = time.perf_counter()
            with torch.no_grad():
                model.forward_with_attention(ids)
            forward_ms = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            page.click('button[data-view="model"]')
            page.wait_for_function(f"document.querySelectorAll('#view-model canvas').length === {cells}")
            grid_ms = (time.perf_counter() - start) * 1000
            grid_size = page.evaluate("window.exploreData().bytes")
            page.click('button[data-view="head"]')
            page.wait_for_selector("#head-svg")
            if i == 0:
                continue  # warm-up round (first request, first draw)
            updates.append(update_ms)
            servers.append(server_ms)
            forwards.append(forward_ms)
            sizes.append(size)
            grids.append(grid_ms)
            grid_sizes.append(grid_size)
            if grid_size > MB:
                problems.append(f"{shape}: round {i}'s model view is {grid_size} bytes, over 1 MB")
            if shown != length:
                problems.append(f"{shape}: round {i} shows {shown} tokens, not {length}")
            if size > MB:
                problems.append(f"{shape}: round {i}'s payload is {size} bytes, over 1 MB")
        problems += [f"{shape}: console error {e}" for e in errors]
        page.close()
    ratios = [u / f for u, f in zip(updates, forwards)]
    return {
        "model": shape,
        "parameters": params,
        "tokens": length,
        "update_ms": updates,
        "server_ms": servers,
        "forward_ms": forwards,
        "ratios": ratios,
        "payload_bytes": sizes,
        "model_view_ms": grids,
        "model_view_bytes": grid_sizes,
        "problems": problems,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8, help="paired rounds per model (after one warm-up)")
    p.add_argument("--tokens", type=int, default=128, help="input tokens")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--quick", action="store_true", help="tiny models, 6 rounds of 32 tokens: a smoke test")
    p.add_argument("--strict", action="store_true", help="exit 1 when a goal fails, too")
    p.add_argument("--json", type=Path, help="write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    args = parse_args(argv)
    if args.quick:
        args.rounds, args.tokens = 6, 32
    if args.rounds < 6:
        raise SystemExit("--rounds must be >= 6 (paired rounds)")
    torch.set_num_threads(args.threads)
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("no Chromium on PATH (Debian's chromium package)")
    rng = random.Random(0)
    tokenizer = build_tokenizer(
        "bpe", [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)], vocab_size=512
    )
    start_load = loadavg()
    print(f"load average at start: {start_load[0]:.2f} {start_load[1]:.2f} {start_load[2]:.2f} "
          f"({os.cpu_count()} CPUs, {args.threads} torch thread(s))")  # fmt: skip
    shapes = ["lm-quick", "135M-quick"] if args.quick else ["lm", "135M"]
    results = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            for shape in shapes:
                results.append(measure(shape, tokenizer, browser, args.rounds, args.tokens))
        finally:
            browser.close()
    print()
    print("| model | params | tokens | update p50 ms | update p95 ms | forward p50 ms | forward p95 ms "
          "| ratio p50 | p95 ratio | rounds <= 1.3x | payload max kB | model view p50 / p95 ms | model view kB "
          "| goal | result |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    passed = True
    for r in results:
        u95, f95 = pct(r["update_ms"], 95), pct(r["forward_ms"], 95)
        wins = sum(x <= RATIO_GOAL for x in r["ratios"])
        if r["model"].startswith("lm"):
            goal, ok = f"p95 <= {LM_GOAL_MS:.0f} ms", u95 <= LM_GOAL_MS
        else:
            goal, ok = f"p95 <= {RATIO_GOAL}x forward p95", u95 <= RATIO_GOAL * f95
        passed &= ok
        r.update(update_p95=u95, forward_p95=f95, goal=goal, passed=ok, rounds_within=wins)
        print(
            f"| {r['model']} | {r['parameters'] / 1e6:.1f}M | {r['tokens']} | {statistics.median(r['update_ms']):.0f} "
            f"| {u95:.0f} | {statistics.median(r['forward_ms']):.0f} | {f95:.0f} "
            f"| {statistics.median(r['ratios']):.2f} "
            f"| {u95 / f95:.2f} | {wins}/{len(r['ratios'])} | {max(r['payload_bytes']) / 1000:.0f} "
            f"| {statistics.median(r['model_view_ms']):.0f} / {pct(r['model_view_ms'], 95):.0f} "
            f"| {max(r['model_view_bytes']) / 1000:.0f} | {goal} "
            f"| {'PASS' if ok else 'FAIL'} |"
        )
    print("\nwhere an update's time goes (p50): the server's view (forward pass, packing, JSON) / the rest "
          "(transfer, parsing, unpacking, drawing)")  # fmt: skip
    for r in results:
        server, rest = statistics.median(r["server_ms"]), [u - s for u, s in zip(r["update_ms"], r["server_ms"])]
        print(f"  {r['model']}: server {server:.0f} ms, page {statistics.median(rest):.0f} ms")
    end_load = loadavg()
    print(f"\nload average at end: {end_load[0]:.2f} {end_load[1]:.2f} {end_load[2]:.2f}")
    problems = [p for r in results for p in r["problems"]]
    for problem in problems:
        print("CHECK FAILED:", problem)
    print(f"checks: {'pass' if not problems else 'FAIL'}; goals pass: {'yes' if passed else 'no'}")
    if args.json:
        meta = {"quick": args.quick, "threads": args.threads, "load_start": start_load, "load_end": end_load}
        args.json.write_text(json.dumps({"meta": meta, "rows": results}, indent=2))
    return 1 if problems or (args.strict and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())
