"""Benchmark: the serving engine's prefix cache: time to first token of requests that share a long prompt prefix.

Run::

    .venv/bin/python benchmarks/prefix_cache.py              # full run, 1 thread (a few minutes)
    .venv/bin/python benchmarks/prefix_cache.py --quick      # tiny model and prefix, 1 round: a smoke test
    .venv/bin/python benchmarks/prefix_cache.py --json out.json

The model: SmolLM2-135M's shape as a random :class:`attnkit.models.LanguageModel` (the llama preset's fields:
vocabulary 49,152, width 576, 30 layers, 9 heads / 3 key-value heads, feed-forward 1,536, SwiGLU, RMSNorm,
rotary (base 100,000), tied output layer; 134.5M parameters; context 2,048), float32, nothing downloaded. Its
tokenizer: a word-level vocabulary of 49,152 made-up words (every id decodes; the text is not the point here).

The requests: ``--prefix`` (1,000) random token ids shared by every request (a long system prompt), then each
request's own ``--suffix`` (20) random ids; greedy, ``--new-tokens`` (4) tokens, no stop id. Two
:class:`attnkit.serve.Engine` s over the same model, in this process: one with a
:class:`~attnkit.models.generation.prefix_cache.PrefixCache` (``--cache-mb``, 256 MB, blocks of 16 tokens; what
``attnkit serve --prefix-cache-mb`` builds), one without. A warm-up request (the prefix and a suffix of its own)
goes to both first, so the cache holds the prefix before timing.

``--rounds`` (6) paired rounds: each round sends one new request (the prefix and a new suffix) to both engines,
one after the other, the order alternated every round. Time to first token (TTFT): from ``submit`` to the
request's first event. Reported: each engine's median TTFT, the median over rounds of the per-round ratio
TTFT with / TTFT without, the rounds where that ratio meets the goal, and the cache's hits and reused tokens.
The generated ids must be identical with and without the cache (the script exits with status 1 otherwise). The
goal (issue 34): a median ratio <= 0.25 (the script exits with status 1 if it misses, or if the cache never hit;
``--quick`` checks the tokens and the hits but no goal).

Before starting, the script checks that the machine is quiet (1-minute load average and the spread of a short
calibration loop) and prints a ``WARNING`` if it is not; the load is printed again at the end.
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
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from attnkit.text.tokenizers import SPECIAL_TOKENS, Tokenizer, tokenizer_from_dict
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.text.tokenizers import SPECIAL_TOKENS, Tokenizer, tokenizer_from_dict
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.models.generation.prefix_cache import PrefixCache
from attnkit.models.lm_config import PRESETS
from attnkit.serve import Engine, Failed, Finished, SamplingParams
from encoder_block import calibrate, loadavg

GOAL_RATIO = 0.25  # TTFT with the cache / without, at most


def word_tokenizer(vocab: int) -> Tokenizer:
    """A word-level tokenizer of exactly ``vocab`` ids (the specials, ``" "``, then made-up words): every id
    of the model decodes."""
    words = [*SPECIAL_TOKENS, " "]
    words += [f"w{i}" for i in range(vocab - len(words))]
    return tokenizer_from_dict({"format": "attnkit.tokenizer", "version": 1, "kind": "word", "vocab": words})


def build(args: argparse.Namespace) -> LanguageModel:
    # llama's fields without `preset`: with it, tie_weights=True (the field's default) would be reset to the
    # preset's untied head, even through from_preset; SmolLM2-135M ties its output layer to the embedding
    llama = {**PRESETS["llama"], "tie_weights": True}
    config = LanguageModelConfig(
        **llama,
        vocab_size=args.vocab,
        d_model=args.d_model,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        dim_feedforward=args.ff,
        max_len=args.context,
        rope_theta=100000.0,  # SmolLM2's
        dropout=0.0,
    )
    torch.manual_seed(0)
    return LanguageModel(config).eval()


def request(engine: Engine, prompt: list[int], new_tokens: int) -> tuple[float, tuple[int, ...]]:
    """Send ``prompt`` to ``engine`` and wait for it: (seconds from submit to the first event, generated ids)."""
    events: queue.Queue[Any] = queue.Queue()
    start = time.perf_counter()
    engine.submit(prompt, SamplingParams(max_tokens=new_tokens, temperature=0.0), events.put)
    ttft = None
    while True:
        event = events.get(timeout=600)
        if ttft is None:
            ttft = time.perf_counter() - start
        if isinstance(event, Failed):
            raise RuntimeError(f"the request failed: {event.message}")
        if isinstance(event, Finished):
            return ttft, event.ids


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--prefix", type=int, default=1000, help="tokens shared by every request")
    p.add_argument("--suffix", type=int, default=20, help="each request's own tokens after the prefix")
    p.add_argument("--new-tokens", type=int, default=4)
    p.add_argument("--rounds", type=int, default=6, help="paired rounds (one request to each engine)")
    p.add_argument(
        "--cache-mb", type=int, default=256, help="the prefix cache's memory bound in MB (0: keeps nothing, so no hits)"
    )
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--d-model", type=int, default=576)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--ff", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--quick", action="store_true", help="tiny model, 128-token prefix, 1 round, no goal check")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.d_model, args.heads, args.kv_heads, args.ff, args.vocab = 2, 64, 4, 2, 128, 512
        args.prefix, args.suffix, args.rounds = 128, 8, 1
    for name in ("prefix", "suffix", "new_tokens", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.cache_mb < 0:
        p.error("--cache-mb must be >= 0 (0: the cache keeps nothing)")
    args.context = max(2048, args.prefix + args.suffix + args.new_tokens + 1)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start, spread = loadavg(), calibrate(args.threads)["max_over_min"]
    ncpu = os.cpu_count() or 1
    print(f"# prefix cache benchmark ({platform.processor() or platform.machine()}, {ncpu} cores, "
          f"{args.threads} threads)")  # fmt: skip
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    if load_start[0] > 0.5 or spread > 1.5:
        print(f"WARNING: the machine is not quiet (1-minute load {load_start[0]:.2f}, calibration spread "
              f"{spread:.2f}x): timings are noisy, compare ratios")  # fmt: skip
    model, tokenizer = build(args), word_tokenizer(args.vocab)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {args.layers} layers, d={args.d_model}, {args.heads}/{args.kv_heads} heads, ff {args.ff}, vocab "
          f"{args.vocab}, {n_params / 1e6:.1f}M parameters; prompts: a shared {args.prefix}-token prefix + "
          f"{args.suffix} tokens of each request's own; {args.new_tokens} new tokens, greedy")  # fmt: skip
    rng = random.Random(1)
    prefix = [rng.randrange(4, args.vocab) for _ in range(args.prefix)]
    prompts = [prefix + [rng.randrange(4, args.vocab) for _ in range(args.suffix)] for _ in range(args.rounds + 1)]
    cache = PrefixCache(args.cache_mb * 2**20)
    rounds: list[dict[str, Any]] = []
    with (
        Engine(model, tokenizer, stop_ids=[], max_batch=1, prefix_cache=cache) as cached,
        Engine(model, tokenizer, stop_ids=[], max_batch=1) as plain,
    ):
        engines = {"cache": cached, "none": plain}
        for engine in engines.values():  # warm-up; fills the cache with the prefix
            request(engine, prompts[0], args.new_tokens)
        before = cached.stats()
        for i, prompt in enumerate(prompts[1:]):
            order = ["cache", "none"] if i % 2 == 0 else ["none", "cache"]
            runs = {name: request(engines[name], prompt, args.new_tokens) for name in order}
            ttft = {name: runs[name][0] for name in engines}
            rounds.append({"first": order[0], "ttft_cache_s": ttft["cache"], "ttft_none_s": ttft["none"],
                           "ratio": ttft["cache"] / ttft["none"], "ids_cache": list(runs["cache"][1]),
                           "ids_none": list(runs["none"][1])})  # fmt: skip
        after = cached.stats()
    hits = after["prefix_hits"] - before["prefix_hits"]
    reused = after["prefix_reused_tokens"] - before["prefix_reused_tokens"]
    identical = all(r["ids_cache"] == r["ids_none"] for r in rounds)
    ratios = [r["ratio"] for r in rounds]
    ratio = statistics.median(ratios)
    wins = sum(x <= GOAL_RATIO for x in ratios)
    summary = {
        "ttft_cache_s": statistics.median(r["ttft_cache_s"] for r in rounds),
        "ttft_none_s": statistics.median(r["ttft_none_s"] for r in rounds),
        "ratio": ratio,
        "ratios": ratios,
        "wins": wins,
        "hits": hits,
        "misses": after["prefix_misses"] - before["prefix_misses"],
        "reused_tokens": reused,
        "evictions": after["prefix_evictions"],
        "cache_bytes": after["prefix_bytes"],
        "identical": identical,
    }
    print(f"\n{args.rounds} paired rounds (one request to each engine, order alternated); medians over rounds\n")
    print("| prefix + suffix | TTFT without cache (s) | TTFT with cache (s) | with / without | rounds <= "
          f"{GOAL_RATIO} | hits | reused tokens | tokens identical |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    print(f"| {args.prefix} + {args.suffix} | {summary['ttft_none_s']:.3f} | {summary['ttft_cache_s']:.3f} | "
          f"{ratio:.3f} | {wins}/{args.rounds} | {hits}/{args.rounds} | {reused} | "
          f"{'yes' if identical else 'NO'} |")  # fmt: skip
    print("per round (with / without): " + ", ".join(f"{x:.3f}" for x in ratios))
    print(f"cache: {after['prefix_entries']} entries, {after['prefix_bytes'] / 2**20:.1f} MB, "
          f"{after['prefix_evictions']} evictions")  # fmt: skip
    passed = ratio <= GOAL_RATIO
    if args.quick:
        print(f"\ngoal: TTFT with the cache <= {GOAL_RATIO}x without (median of paired rounds): {ratio:.3f}x "
              "| not checked (--quick) |")  # fmt: skip
    else:
        verdict = "PASS" if passed else "FAIL"
        print(f"\ngoal: TTFT with the cache <= {GOAL_RATIO}x without (median of {args.rounds} paired rounds): "
              f"{ratio:.3f}x; {wins} of {args.rounds} rounds <= {GOAL_RATIO}x | {verdict} |")  # fmt: skip
    load_end = loadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(f"goal passes: {passed}; tokens identical with and without the cache: {identical}; hits: {hits}")
    if args.json is not None:
        meta = {"quick": args.quick, "threads": args.threads, "load_start": load_start, "load_end": load_end,
                "calibration_spread": spread, "prefix": args.prefix, "suffix": args.suffix,
                "new_tokens": args.new_tokens, "rounds": args.rounds, "cache_mb": args.cache_mb,
                "parameters": n_params}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "summary": summary, "rounds": rounds}, indent=2))
    status = 0
    if not identical:
        print("FAIL: the tokens with the prefix cache differ from those without it", file=sys.stderr)
        status = 1
    if hits < args.rounds:
        print(f"FAIL: the prefix cache hit {hits} of {args.rounds} requests that share a prefix", file=sys.stderr)
        status = 1
    if not args.quick and not passed:
        print(f"FAIL: median TTFT ratio {ratio:.3f} misses the goal <= {GOAL_RATIO}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
