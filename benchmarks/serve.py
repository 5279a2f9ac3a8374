"""Benchmark: the serving engine's continuous batching against serving the same requests one at a time.

Run::

    .venv/bin/python benchmarks/serve.py              # full run, 1 thread (a few minutes)
    .venv/bin/python benchmarks/serve.py --quick      # tiny sizes: a smoke test
    .venv/bin/python benchmarks/serve.py --json out.json

The model: a random Llama-shaped :class:`attnkit.models.LanguageModel` (``--layers`` 6, width
``--d-model`` 384, 6 heads / 2 key-value heads, SwiGLU, RMSNorm, rotary; context 512), with a byte-level
BPE tokenizer (512 tokens) trained here on generated text; float32, nothing downloaded.

The requests: ``--requests`` (32) greedy completions of random prompts of 8..64 tokens, each asking
for ``--new-tokens`` (64) tokens, with no stop id, so every request generates the same number of
tokens whatever the batch. They go to one :class:`attnkit.serve.Engine` in this process (what
``attnkit serve`` runs behind its HTTP layer), from 1, 8 and 32 concurrent clients (threads; each
client submits its next request when the previous one finished, a closed loop):

* **sequential**: the same engine, one request at a time (1 client).
* **c clients**: up to c requests decoded together; requests join the running batch at the next step.

``--rounds`` (6) paired rounds: each round serves the requests sequentially, then from every client
count, so a ratio compares runs taken moments apart. Reported per row: the median over rounds of
generated tokens/s (all tokens / wall time), time to first token (submit -> first event) p50 and p95
over all rounds, the peak rows decoded together, the median per-round throughput ratio to
sequential, and in how many rounds the ratio reached the goal. Every request's generated ids must be
identical to the first sequential run's (the script exits with status 1 otherwise). The goal: a
median >= 4x sequential throughput at 8 clients.

Before starting, the script checks that the machine is quiet (1-minute load average and the spread
of a short calibration loop) and prints a ``WARNING`` if it is not; the load is printed again at the
end. Timings on a shared machine are noisy: compare ratios, not absolute tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
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
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.serve import Engine, Failed, Finished, SamplingParams
from encoder_block import calibrate, loadavg

GOAL_CLIENTS, GOAL_RATIO = 8, 4.0


def build(args: argparse.Namespace, max_len: int = 512) -> tuple[LanguageModel, Any]:
    """The random Llama-shaped model of ``args`` (context ``max_len``) and its byte-level BPE tokenizer (also
    benchmarks/stop_strings.py's)."""
    words = ["owl", "moon", "river", "stone", "quiet", "night", "over", "the", "and", "light", "cold"]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]
    tokenizer = build_tokenizer("bpe", texts, vocab_size=args.vocab)
    config = LanguageModelConfig.model_validate(
        dict(
            preset="llama",
            vocab_size=tokenizer.vocab_size,
            d_model=args.d_model,
            num_layers=args.layers,
            num_heads=args.heads,
            num_kv_heads=args.kv_heads,
            dim_feedforward=args.d_model * 8 // 3,
            max_len=max_len,
            dropout=0.0,
        )
    )
    torch.manual_seed(0)
    return LanguageModel(config).eval(), tokenizer


def prompts(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    rng = random.Random(1)
    return [[rng.randrange(4, vocab) for _ in range(rng.randint(8, 64))] for _ in range(args.requests)]


def serve(engine: Engine, reqs: list[list[int]], clients: int, new_tokens: int) -> dict[str, Any]:
    """All ``reqs`` through ``engine`` from ``clients`` closed-loop clients: ids, TTFTs and wall time."""
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0)
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(reqs)):
        todo.put(i)
    ids: list[tuple[int, ...]] = [()] * len(reqs)
    ttft: list[float] = [0.0] * len(reqs)
    errors: list[str] = []

    def client() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            events: queue.Queue[Any] = queue.Queue()
            start = time.perf_counter()
            engine.submit(reqs[i], params, events.put)
            first = True
            while True:
                event = events.get(timeout=600)
                if first:
                    ttft[i], first = time.perf_counter() - start, False
                if isinstance(event, Failed):
                    errors.append(event.message)
                    return
                if isinstance(event, Finished):
                    ids[i] = event.ids
                    break

    engine.peak_rows = 0
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"requests failed: {errors[:3]}")
    return {"ids": ids, "ttft": ttft, "wall": wall, "peak_rows": engine.peak_rows}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--rounds", type=int, default=6, help="paired rounds (each runs every client count once)")
    p.add_argument("--quick", action="store_true", help="tiny model, 8 requests of 8 tokens, 2 rounds: a smoke test")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.new_tokens, args.layers, args.d_model, args.heads, args.kv_heads = 8, 8, 2, 64, 4, 2
        args.vocab, args.rounds = 300, 2
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    args.clients = sorted({1, *args.clients})  # sequential is the reference of every ratio
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start, spread = loadavg(), calibrate(args.threads)["max_over_min"]
    ncpu = os.cpu_count() or 1
    print(f"# serve benchmark ({platform.processor() or platform.machine()}, {ncpu} cores, {args.threads} threads)")
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    if load_start[0] > 0.5 or spread > 1.5:
        print(f"WARNING: the machine is not quiet (1-minute load {load_start[0]:.2f}, calibration spread "
              f"{spread:.2f}x): timings are noisy, compare ratios")  # fmt: skip
    model, tokenizer = build(args)
    n_params = sum(p.numel() for p in model.parameters())
    reqs = prompts(args, tokenizer.vocab_size)
    print(f"model: {args.layers} layers, d={args.d_model}, {args.heads}/{args.kv_heads} heads, "
          f"vocab {tokenizer.vocab_size}, {n_params / 1e6:.1f}M parameters; {len(reqs)} requests x "
          f"{args.new_tokens} new tokens, prompts 8..64 tokens")  # fmt: skip
    rounds: list[dict[int, dict[str, Any]]] = []
    with Engine(model, tokenizer, stop_ids=[], max_batch=max(args.clients)) as engine:
        serve(engine, reqs[:2], 1, 4)  # warm-up
        for _ in range(args.rounds):  # paired: every setting once per round, sequential first
            sequential = serve(engine, reqs, 1, args.new_tokens)
            rounds.append({c: sequential if c == 1 else serve(engine, reqs, c, args.new_tokens) for c in args.clients})
    reference = rounds[0][1]["ids"]
    rows: list[dict[str, Any]] = []
    for clients in args.clients:
        runs = [r[clients] for r in rounds]
        tokens = sum(map(len, runs[0]["ids"]))
        ratios = [r[1]["wall"] / r[clients]["wall"] for r in rounds]
        ttft = [t for run in runs for t in run["ttft"]]
        rows.append(
            {
                "clients": clients,
                "tokens_per_s": statistics.median(tokens / run["wall"] for run in runs),
                "ttft_p50_s": statistics.median(ttft),
                "ttft_p95_s": percentile(ttft, 0.95),
                "peak_rows": max(run["peak_rows"] for run in runs),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
                "wins": sum(x >= GOAL_RATIO for x in ratios),
                "identical": all(run["ids"] == reference for run in runs),
                "tokens": tokens,
            }
        )
    print(f"\n{args.rounds} paired rounds (each: sequential, then every client count); medians over rounds\n")
    head = ["clients", "tokens/s", "TTFT p50 (s)", "TTFT p95 (s)", "peak rows", "x sequential", "rounds >= goal"]
    print("| " + " | ".join([*head, "tokens = sequential"]) + " |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['clients']} | {r['tokens_per_s']:,.1f} | {r['ttft_p50_s']:.3f} | {r['ttft_p95_s']:.3f} | "
              f"{r['peak_rows']} | {r['ratio']:.2f} | {r['wins']}/{args.rounds} | "
              f"{'yes' if r['identical'] else 'NO'} |")  # fmt: skip
    goal = next((r for r in rows if r["clients"] == GOAL_CLIENTS), None)
    passed = goal is not None and goal["ratio"] >= GOAL_RATIO
    if goal is not None:
        per_round = ", ".join(f"{x:.2f}" for x in goal["ratios"])
        verdict = "PASS" if passed else "FAIL"
        print(f"\ngoal: >= {GOAL_RATIO}x sequential throughput at {GOAL_CLIENTS} clients (median of {args.rounds} "
              f"paired rounds): {goal['ratio']:.2f}x; per round {per_round}; "
              f"{goal['wins']} of {args.rounds} rounds >= {GOAL_RATIO}x | {verdict} |")  # fmt: skip
    load_end = loadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    identical = all(r["identical"] for r in rows)
    print(f"goals pass: {passed}; tokens identical to sequential: {identical}")
    if args.json is not None:
        meta = {"quick": args.quick, "threads": args.threads, "load_start": load_start, "load_end": load_end,
                "calibration_spread": spread, "requests": len(reqs), "new_tokens": args.new_tokens,
                "rounds": args.rounds}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    if not identical:
        print("ERROR: a batched request's tokens differ from the same request served alone", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
