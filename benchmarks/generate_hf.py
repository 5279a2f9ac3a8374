"""Benchmark: greedy generation of attnkit's ``LanguageModel`` against Hugging Face ``transformers``'
``generate()`` on a real-size Llama-family shape, with the same weights.

Run::

    .venv/bin/python benchmarks/generate_hf.py                 # full run, 1 thread (a few minutes)
    .venv/bin/python benchmarks/generate_hf.py --quick         # tiny shape, 2 rounds: a smoke test
    .venv/bin/python benchmarks/generate_hf.py --json out.json

The model is SmolLM2-135M's shape with random weights: 30 layers, width 576, 9 query heads over 3
key/value heads (grouped-query attention, head size 64), SwiGLU feed-forward 1536, RMSNorm (eps 1e-5),
rotary positions (theta 100000), context 2048, vocabulary 49,152, output layer tied to the token
embedding. A ``LlamaForCausalLM`` of that shape is built locally from a seeded random init (nothing
is downloaded), saved with ``save_pretrained`` to a temporary folder and loaded into attnkit with
:func:`attnkit.interop.load_pretrained`: both compute with the same float32 weights.

Each round generates ``--new-tokens`` (64) tokens greedily after the prompts, never stopping early:

* **A**  attnkit: ``LanguageModel.generate(prompts, n, temperature=0, stop_at_eos=False)``, prompts as a
  list (attnkit left-pads them itself), with the key/value cache.
* **H**  transformers: ``LlamaForCausalLM.generate(ids, attention_mask=..., max_new_tokens=n,
  do_sample=False, eos_token_id=None, pad_token_id=0)`` on the left-padded prompts (its default
  ``sdpa`` attention and dynamic cache).

Batch 1: one prompt of ``--prompt`` (32) tokens. Batch 8: prompts of lengths spread evenly over
``--mixed-min``..``--mixed-max`` (8..64) tokens. Before timing, the new tokens of A and H must be
identical in every row (the script exits with status 1 otherwise): that call is also the warm-up.

Timing: ``torch.set_num_threads(--threads)`` (1 by default) for both, under ``torch.inference_mode()``,
garbage collector off. ``--rounds`` (6) paired rounds alternate the order (A then H, H then A, ...).
Each round's ratio is ``time_H / time_A`` (above 1: attnkit is faster); the result is the median
ratio, with per-round wins/ties/losses (a tie: within ``--tie-band``, 3 %). The goal (median ratio
>= 1.0x at both batch sizes) is printed as PASS/FAIL, not asserted: timings on a shared machine are
noisy. Before starting, the script checks that the machine is quiet (1-minute load average and the
spread of a short calibration loop, as ``benchmarks/encoder_block.py``) and prints a ``WARNING`` if
not; the load is printed again at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from attnkit.interop import load_pretrained
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.interop import load_pretrained
from attnkit.models import LanguageModel
from encoder_block import calibrate, loadavg, rel_iqr

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=2048,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
TINY = dict(SMOLLM2_135M, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
PAD = 0


def build_models(shape: dict, seed: int) -> tuple[LanguageModel, torch.nn.Module]:
    """A seeded random ``LlamaForCausalLM`` of ``shape`` and attnkit's model loaded from its
    ``save_pretrained`` folder (the same weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, bos_token_id=1, eos_token_id=2, pad_token_id=PAD, torch_dtype="float32")
    hf = LlamaForCausalLM(config).float().eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = load_pretrained(folder).model
    if not isinstance(ours, LanguageModel):
        raise SystemExit(f"load_pretrained gave a {type(ours).__name__}, expected a LanguageModel")
    return ours.eval(), hf


def make_prompts(batch: int, low: int, high: int, vocab: int, seed: int) -> list[torch.Tensor]:
    """``batch`` random prompts (ids 3.., no special ids) with lengths spread evenly over ``low..high``."""
    g = torch.Generator().manual_seed(seed)
    lengths = [round(low + (high - low) * i / max(batch - 1, 1)) for i in range(batch)]
    return [torch.randint(3, vocab, (n,), generator=g) for n in lengths]


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' inputs: ids ``[B, T]`` left-padded with ``PAD`` and the attention mask (1 = token)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = p
        mask[i, width - len(p) :] = 1
    return ids, mask


def runner(impl: str, ours: LanguageModel, hf: torch.nn.Module, prompts: list[torch.Tensor], n: int):
    """A call of ``impl`` (A: attnkit, H: transformers) that returns the new tokens ``[B, n']``."""
    width = max(len(p) for p in prompts)
    ids, mask = left_padded(prompts)
    if impl == "A":
        listed = [p.tolist() for p in prompts]

        def run_a() -> torch.Tensor:
            with torch.inference_mode():
                return ours.generate(listed, n, temperature=0.0, use_cache=True, stop_at_eos=False)[:, width:]

        return run_a

    def run_h() -> torch.Tensor:
        with torch.inference_mode():
            out = hf.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=PAD,
                use_cache=True,
            )
        return out[:, width:]

    return run_h


def time_paired(steps: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """``rounds`` rounds of A and H, the order alternating (A H, H A, ...); per-call seconds."""
    times: dict[str, list[float]] = {"A": [], "H": []}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for impl in ("A", "H") if r % 2 == 0 else ("H", "A"):
                t0 = time.perf_counter()
                steps[impl]()
                times[impl].append(time.perf_counter() - t0)
            ratio = times["H"][-1] / times["A"][-1]
            print(f"...   round {r + 1}/{rounds}: H/A {ratio:.3f}", file=sys.stderr, flush=True)
    finally:
        gc.enable()
    return times


def verdict(ratio: float, band: float) -> str:
    """``win`` (attnkit faster by more than ``band``), ``loss`` or ``tie``."""
    return "win" if ratio > 1 + band else "loss" if ratio < 1 - band else "tie"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny shape, few tokens, 2 rounds: a smoke test")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) for both (default 1)")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds per batch size (default 6; 2 with --quick)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8], help="batch sizes (default 1 8)")
    p.add_argument("--new-tokens", type=int, default=None, help="new tokens per row (default 64; 8 with --quick)")
    p.add_argument("--prompt", type=int, default=32, help="batch 1's prompt length (default 32)")
    p.add_argument("--mixed-min", type=int, default=8, help="shortest prompt of a batch > 1 (default 8)")
    p.add_argument("--mixed-max", type=int, default=64, help="longest prompt of a batch > 1 (default 64)")
    p.add_argument("--tie-band", type=float, default=0.03, help="a round within 1 +- this is a tie (default 0.03)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--break-parity",
        action="store_true",
        help="add noise to attnkit's final norm so that its tokens differ (checks that the script then fails)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    shape = TINY if args.quick else SMOLLM2_135M
    rounds = args.rounds or (2 if args.quick else 6)
    new_tokens = args.new_tokens or (8 if args.quick else 64)
    if rounds < 2:
        raise SystemExit("--rounds must be >= 2 (paired rounds alternate the order)")
    low, high = (2, 12) if args.quick else (args.mixed_min, args.mixed_max)
    prompt_len = 6 if args.quick else args.prompt
    if not 0 < low <= high or prompt_len <= 0:
        raise SystemExit("prompt lengths must be positive, with --mixed-min <= --mixed-max")
    if max(high, prompt_len) + new_tokens > shape["max_position_embeddings"]:
        raise SystemExit(f"the longest prompt + {new_tokens} new tokens exceed the context")
    ncpu = os.cpu_count() or 1
    load_start = loadavg()

    print("# attnkit vs transformers: greedy generation on a Llama-family shape")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, cpu_count={ncpu}, "
        f"threads={torch.get_num_threads()}, float32; model: {shape['num_hidden_layers']} layers, width "
        f"{shape['hidden_size']}, {shape['num_attention_heads']} heads / {shape['num_key_value_heads']} KV heads, "
        f"feed-forward {shape['intermediate_size']}, vocab {shape['vocab_size']:,}, tied head; greedy, "
        f"{new_tokens} new tokens" + (", QUICK (smoke test)" if args.quick else "")
    )
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    calib = calibrate(args.threads)
    print(
        f"calibration (192x192 matmul x20, 25 samples): median {calib['median_s'] * 1e3:.2f} ms, "
        f"IQR {calib['rel_iqr'] * 100:.1f}%, max/min {calib['max_over_min']:.2f}"
    )
    notes = []
    if load_start[0] > 0.5 * ncpu:
        notes.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        notes.append("the calibration loop's timings spread widely: another process is using the CPU")
    for w in notes:
        print(f"WARNING: {w}")
    print()

    ours, hf = build_models(shape, args.seed)
    if args.break_parity:
        with torch.no_grad():
            norm = ours.decoder.norm.weight
            norm.add_(torch.randn(norm.shape, generator=torch.Generator().manual_seed(1)))
    rows = []
    for batch in args.batches:
        if batch == 1:
            prompts = make_prompts(1, prompt_len, prompt_len, shape["vocab_size"], args.seed + 1)
        else:
            prompts = make_prompts(batch, low, high, shape["vocab_size"], args.seed + batch)
        steps = {impl: runner(impl, ours, hf, prompts, new_tokens) for impl in ("A", "H")}
        a, h = steps["A"](), steps["H"]()  # the parity check is also the warm-up
        if a.shape != (batch, new_tokens) or not torch.equal(a, h):
            same = (a.shape == h.shape) and [bool(torch.equal(a[i], h[i])) for i in range(batch)]
            print(
                f"FAIL: B={batch}: attnkit's new tokens {tuple(a.shape)} differ from transformers' {tuple(h.shape)} "
                f"(rows equal: {same})",
                file=sys.stderr,
            )
            return 1
        print(f"... B={batch}: tokens identical, timing {rounds} paired rounds", file=sys.stderr, flush=True)
        times = time_paired(steps, rounds)
        ratios = [th / ta for ta, th in zip(times["A"], times["H"])]
        verdicts = [verdict(r, args.tie_band) for r in ratios]
        med = {impl: statistics.median(ts) for impl, ts in times.items()}
        rows.append(
            {
                "batch": batch,
                "prompt_lengths": [len(p) for p in prompts],
                "rounds": rounds,
                "median_s": med,
                "tokens_per_s": {impl: batch * new_tokens / med[impl] for impl in med},
                "ratios": ratios,
                "median_ratio": statistics.median(ratios),
                "wins": verdicts.count("win"),
                "ties": verdicts.count("tie"),
                "losses": verdicts.count("loss"),
                "rel_iqr": {impl: rel_iqr(ts) for impl, ts in times.items()},
                "times_s": times,
                "tokens_identical": True,
            }
        )
    load_end = loadavg()

    print(f"## Greedy generation: new tokens/s (B * {new_tokens} / median time of one call)")
    print()
    print("| batch | prompt lengths | A attnkit | H transformers | A/H (median of paired ratios) "
          "| rounds | A wins / ties / H wins | tokens A = H |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---|---|")
    for row in rows:
        lengths = row["prompt_lengths"]
        span = str(lengths[0]) if len(set(lengths)) == 1 else f"{min(lengths)}..{max(lengths)}"
        tps = row["tokens_per_s"]
        print(
            f"| {row['batch']} | {span} | {tps['A']:,.1f} | {tps['H']:,.1f} | {row['median_ratio']:.3f}x | "
            f"{row['rounds']} | {row['wins']} / {row['ties']} / {row['losses']} | yes |"
        )
    print()
    print(
        "A/H: per round, time of H over time of A (above 1: attnkit faster); the median over rounds. "
        f"A round within +-{args.tie_band * 100:.0f} % is a tie. Per-round ratios: "
        + "; ".join(f"B={r['batch']}: " + ", ".join(f"{x:.3f}" for x in r["ratios"]) for r in rows)
    )
    print()
    goals = [(f"B={r['batch']}: attnkit / transformers generate", r["median_ratio"], 1.0) for r in rows]
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    for name, measured, target in goals:
        print(f"| {name} | {measured:.3f}x | >= {target:.2f}x | {'PASS' if measured >= target else 'FAIL'} |")
    print()
    print(f"{sum(m >= t for _, m, t in goals)}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in notes:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses a tiny model and few tokens; its numbers say nothing about the goals.")

    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpu_count": ncpu,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "model": shape,
                "new_tokens": new_tokens,
                "tie_band": args.tie_band,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": notes,
            },
            "rows": rows,
            "goals": [{"name": n, "measured": m, "target": t, "passed": m >= t} for n, m, t in goals],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
