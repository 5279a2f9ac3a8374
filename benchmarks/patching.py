"""Activation patching sweep: batched (many patched copies per forward pass) vs one cell per forward pass.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/patching.py            # 8 paired rounds
    .venv/bin/python benchmarks/patching.py --rounds 6 --json out.json

A layers × positions sweep of the residual stream (:func:`attnkit.models.patching.patch_residual`) on a random
decoder, timed both ways in each round, the order alternating between rounds: ``--chunk-size`` patched runs per
forward pass, and ``chunk_size=1`` (one forward pass per cell, the loop people write by hand). Both give the same
scores (checked, within 1e-5). The goal (issue 37): the batched sweep at least 3x faster (the median of the
per-round ratios).

Before starting, the script checks that the machine is quiet (1-minute load average and the spread of a short
calibration loop) and prints a ``WARNING`` if it is not. Timings on a shared machine are noisy: compare the
ratio, not the absolute times.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import torch

from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.patching import logit_diff, patch_residual

GOAL = 3.0


def calibrate() -> dict[str, float]:
    """Time a fixed matmul workload repeatedly; a busy machine shows as spread between runs."""
    a = torch.randn(192, 192)
    samples = []
    for _ in range(25):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        samples.append(time.perf_counter() - t0)
    q = statistics.quantiles(samples, n=4)
    return {"median_s": statistics.median(samples), "rel_iqr": (q[2] - q[0]) / statistics.median(samples),
            "max_over_min": max(samples) / min(samples)}  # fmt: skip


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="paired rounds (at least 6)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--length", type=int, default=32, help="tokens of the clean and corrupted inputs")
    p.add_argument("--chunk-size", type=int, default=32, help="patched runs per forward pass (batched)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    if args.rounds < 6:
        p.error("--rounds must be at least 6 (paired rounds)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load = loadavg()
    calib = calibrate()
    print(f"load average {load:.2f}; calibration median {calib['median_s'] * 1e3:.2f} ms, IQR "
          f"{calib['rel_iqr'] * 100:.1f}%, max/min {calib['max_over_min']:.2f}")  # fmt: skip
    if load > 0.5:
        print(f"WARNING: 1-minute load average is {load:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        print("WARNING: the calibration loop's timings spread widely: another process is using the CPU")

    torch.manual_seed(0)
    shape = {"d_model": args.d_model, "num_heads": args.heads, "num_layers": args.layers}
    config = LanguageModelConfig(vocab_size=args.vocab, dim_feedforward=4 * args.d_model, max_len=args.length, **shape)
    model = LanguageModel(config).eval()
    clean = torch.randint(3, args.vocab, (1, args.length))
    corrupted = clean.clone()
    corrupted[0, args.length // 2] = 3 + (int(clean[0, args.length // 2]) + 7) % (args.vocab - 3)
    metric = logit_diff(int(clean[0, -1]), int(corrupted[0, -1]) + 1)
    ways = {"batched": args.chunk_size, "one_per_pass": 1}
    results = {name: patch_residual(model, clean, corrupted, metric, chunk_size=c) for name, c in ways.items()}
    diff = float((results["batched"].raw - results["one_per_pass"].raw).abs().max())
    assert diff <= 1e-5, f"the batched sweep differs from one cell per pass by {diff}"
    cells = args.layers * args.length
    print(f"{args.layers} layers x {args.length} positions = {cells} patched runs; d_model {args.d_model}, "
          f"chunk size {args.chunk_size}; max |batched - one per pass| = {diff:.2e}")  # fmt: skip

    times: dict[str, list[float]] = {name: [] for name in ways}
    gc.disable()
    try:
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                t0 = time.perf_counter()
                patch_residual(model, clean, corrupted, metric, chunk_size=ways[name])
                times[name].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    ratios = [one / batched for one, batched in zip(times["one_per_pass"], times["batched"])]
    ratio = statistics.median(ratios)
    for name, ts in times.items():
        print(f"{name:>13}: median {statistics.median(ts) * 1e3:8.1f} ms, min {min(ts) * 1e3:8.1f} ms")
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(f"speed-up (median of {args.rounds} paired rounds): {ratio:.2f}x, min {min(ratios):.2f}x, "
          f"max {max(ratios):.2f}x; goal >= {GOAL}x {verdict}")  # fmt: skip
    print(f"load average at the end {loadavg():.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "times_s": times, "ratios": ratios, "speedup": ratio, "max_diff": diff,
                       "calibration": calib, "load_start": load}, f, indent=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
