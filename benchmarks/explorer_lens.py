"""Benchmark: the explorer's logit-lens view (``POST /api/lens``) on the 135M Llama shape at 128 tokens against the
model's plain forward pass on the same ids (issue 37: p95 <= 1.3x the forward pass).

Run::

    .venv/bin/python benchmarks/explorer_lens.py              # SmolLM2-135M's shape, 128 tokens, 8 paired rounds
    .venv/bin/python benchmarks/explorer_lens.py --device cuda
    .venv/bin/python benchmarks/explorer_lens.py --smoke      # a tiny shape, 32 tokens, 6 rounds (--quick: the same)
    .venv/bin/python benchmarks/explorer_lens.py --json out.json

The model: SmolLM2-135M's shape (``generate_hf.SMOLLM2_135M``: d_model 576, 30 layers x 9 heads, 3 key-value heads,
SwiGLU 1536, vocabulary 49,152, tied embeddings) with random weights, a seeded ``LlamaForCausalLM`` read by
:func:`attnkit.interop.load_pretrained` (``generate_hf.build_models``; nothing downloaded), float32, on
``--device`` (cuda when there is one, else the CPU), with a byte-level BPE tokenizer (512 tokens) trained here on
generated text. The explorer's app runs in this process (FastAPI's ``TestClient``, on 127.0.0.1).

Each of ``--rounds`` (at least 6) paired rounds, the order alternating (V F, F V, ...), garbage collector off,
takes a new text of ``--length`` tokens and times

* **V**, the view: ``POST /api/lens {"text"}`` (tokenizing, the model's pass with the residual stream cached, every
  layer's residual through the final norm and the unembedding, the top token and its probability of every cell,
  the labels, JSON, the HTTP round trip in process);
* **F**, the forward: ``model(ids)`` under ``torch.no_grad()`` on the same ids (on the device; synchronised).

Reported: p50 and p95 of each, each round's ratio V / F, and the ratio of the p95s. Checks (exit 1 when one fails):
every view answers 200 with ``(layers + 1) x length`` cells whose last row is the model's own top tokens. Goal:
p95(V) <= 1.3 x p95(F) (``--goal``), exit 1 on a miss (with ``--smoke`` only when ``--goal`` is given: a tiny
model's numbers say nothing about the goal). The machine's quiet is checked first (``encoder_block.quiet_check``:
the load average and a calibration loop's spread, a ``WARNING`` line for each sign that it is not quiet) and the
load printed again at the end: figures from a loaded machine are not final.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
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
from fastapi.testclient import TestClient

from attnkit.interop import Pretrained
from attnkit.viz.explorer import DecoderExplorer
from attnkit.viz.explorer.app import create_explore_app
from encoder_block import loadavg, quiet_check
from generate_hf import SMOLLM2_135M, TINY, build_models

GOAL = 1.3
WORDS = ["owl", "moon", "river", "stone", "quiet", "night", "over", "the", "and", "light", "cold", "sat", "on"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--smoke", "--quick", dest="smoke", action="store_true", help="tiny shape, 32 tokens: a smoke test")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (>= 6; default 8, --smoke 6)")
    p.add_argument("--length", type=int, default=None, help="tokens of each text (default 128, --smoke 32)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")
    p.add_argument("--goal", type=float, default=None, help=f"the most p95(view) / p95(forward) (default {GOAL})")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    args.rounds = args.rounds if args.rounds is not None else (6 if args.smoke else 8)
    args.length = args.length if args.length is not None else (32 if args.smoke else 128)
    if args.rounds < 6:
        p.error(f"--rounds must be >= 6 (a p95 of fewer says little), got {args.rounds}")
    if args.length < 2:
        p.error(f"--length must be >= 2, got {args.length}")
    return args


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def texts_of(explorer: DecoderExplorer, tokenizer: Any, count: int, length: int) -> list[str]:
    """``count`` different texts whose prompts are ``length`` tokens."""
    rng = random.Random(0)
    out: list[str] = []
    while len(out) < count:
        ids = explorer.pretrained.encode_prompt(" ".join(rng.choice(WORDS) for _ in range(length)))[:length]
        text = tokenizer.decode(ids)
        if len(explorer.pretrained.encode_prompt(text)) == length and text not in out:
            out.append(text)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start, calib, notes = quiet_check(args.threads)
    shape = dict(TINY, max_position_embeddings=256) if args.smoke else SMOLLM2_135M
    model, hf = build_models(shape, seed=0)
    del hf
    model = model.to(args.device).eval()
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)]
    tokenizer = build_tokenizer("bpe", corpus, vocab_size=512)
    explorer = DecoderExplorer(Pretrained(model, "lm", tokenizer, Path("135M" if not args.smoke else "tiny")))
    texts = texts_of(explorer, tokenizer, args.rounds + 2, args.length)
    layers = len(model.decoder.layers)
    device = torch.device(args.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    problems: list[str] = []
    times: dict[str, list[float]] = {"view": [], "forward": []}
    with TestClient(create_explore_app(explorer), base_url="http://127.0.0.1") as client:

        def view(text: str) -> None:
            response = client.post("/api/lens", json={"text": text})
            if response.status_code != 200:
                problems.append(f"the view answered {response.status_code}: {response.text[:200]}")
                return
            out = response.json()
            ids = torch.tensor([out["ids"]], device=device)
            cells = sum(len(row) for row in out["top_ids"])
            if cells != (layers + 1) * args.length:
                problems.append(f"{cells} cells, expected {(layers + 1) * args.length}")
            with torch.no_grad():
                own = model(ids)[0].argmax(-1).tolist()
            if out["top_ids"][-1] != own:
                problems.append("the lens's last row is not the model's own top tokens")

        def forward(ids: torch.Tensor) -> None:
            with torch.no_grad():
                model(ids)
            sync()

        for text in texts[:2]:  # warm-up (kernels, allocator), checked
            view(text)
            forward(torch.tensor([explorer.pretrained.encode_prompt(text)], device=device))
        gc.collect()
        gc.disable()
        try:
            for r, text in enumerate(texts[2:]):
                ids = torch.tensor([explorer.pretrained.encode_prompt(text)], device=device)
                for which in ("view", "forward") if r % 2 == 0 else ("forward", "view"):
                    start = time.perf_counter()
                    if which == "view":
                        response = client.post("/api/lens", json={"text": text})
                        sync()
                        if response.status_code != 200:
                            problems.append(f"round {r + 1}: the view answered {response.status_code}")
                    else:
                        forward(ids)
                    times[which].append(time.perf_counter() - start)
                ratio = times["view"][-1] / times["forward"][-1]
                print(f"...   round {r + 1}/{args.rounds}: view/forward {ratio:.3f}", file=sys.stderr, flush=True)
        finally:
            gc.enable()

    ms = {k: [t * 1000 for t in v] for k, v in times.items()}
    ratios = [v / f for v, f in zip(ms["view"], ms["forward"], strict=True)]
    p95_ratio = pct(ms["view"], 95) / pct(ms["forward"], 95)
    goal = args.goal if args.goal is not None else GOAL
    enforced = args.goal is not None or not args.smoke
    met = p95_ratio <= goal
    name = "tiny" if args.smoke else "135M"
    print(f"model: {name} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {layers} layers)")
    print(f"{args.length} tokens, {args.rounds} paired rounds on {args.device} ({args.threads} CPU thread(s))\n")
    print("| model | view p50 ms | view p95 ms | forward p50 ms | forward p95 ms | p95 ratio | goal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    print(
        f"| {name} | {statistics.median(ms['view']):.1f} | {pct(ms['view'], 95):.1f} | "
        f"{statistics.median(ms['forward']):.1f} | {pct(ms['forward'], 95):.1f} | {p95_ratio:.2f} | "
        f"{'PASS' if met else 'FAIL'} (<= {goal}x) |"
    )
    print(f"\nper-round view/forward: {', '.join(f'{r:.2f}' for r in ratios)}")
    load_end = loadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in notes:
        print(f"WARNING: {w}")
    print("checks: " + ("pass" if not problems else "FAIL: " + "; ".join(problems)))
    if args.json is not None:
        meta = {"smoke": args.smoke, "device": args.device, "threads": args.threads, "length": args.length,
                "rounds": args.rounds, "load_start": load_start, "load_end": load_end, "calibration": calib,
                "warnings": notes}  # fmt: skip
        row = {"model": name, "view_ms": ms["view"], "forward_ms": ms["forward"], "ratios": ratios,
               "p95_ratio": p95_ratio, "goal": goal, "met": met, "problems": problems}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "rows": [row]}, indent=2) + "\n")
    return 1 if problems or (enforced and not met) else 0


if __name__ == "__main__":
    sys.exit(main())
