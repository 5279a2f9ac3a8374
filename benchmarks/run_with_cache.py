"""Benchmark: ``run_with_cache`` of one layer on the 135M Llama shape: its memory against caching every layer,
its time against TransformerLens' ``run_with_cache`` on the same weights and names (issue 37).

Run::

    .venv/bin/python benchmarks/run_with_cache.py                # SmolLM2-135M's shape, 1 thread, 6 rounds
    .venv/bin/python benchmarks/run_with_cache.py --quick        # a tiny shape, 2 rounds: a smoke test
    .venv/bin/python benchmarks/run_with_cache.py --json out.json

The model is SmolLM2-135M's shape (``benchmarks/generate_hf.py``) with random weights: a seeded
``LlamaForCausalLM`` built locally (nothing downloaded), saved with ``save_pretrained`` and read by
:func:`attnkit.interop.load_pretrained`. TransformerLens 4's ``TransformerBridge.boot_transformers`` wraps that
very ``LlamaForCausalLM`` (the same float32 weights; a word-level tokenizer is saved beside it, which the bridge
insists on loading; TransformerLens 4 has no ``HookedTransformer`` any more: the bridge is its ``run_with_cache``).

The names: every hook point of block ``--layer`` (the middle one by default) that both libraries name
(``blocks.L.hook_resid_pre``, ``attn.hook_q/k/v/z``, ``hook_rot_q/k``, ``hook_attn_scores``, ``hook_pattern``,
``mlp.hook_pre/pre_linear/post``, ``hook_mlp_out``, ``hook_resid_post``, ...: 16 on a Llama), given to both as a
list. Before timing, every cached activation must agree within 1e-4 (exit status 1 otherwise). The input: one row
of ``--length`` (128) random tokens.

**Time**: ``--rounds`` (6, at least 6) paired rounds, the order alternating (A T, T A, ...), garbage collector off,
both under ``torch.no_grad()``; a round times ``--inner`` (2) such pairs and keeps each one's fastest (load only
adds time). A is ``attnkit.nn.hooks.run_with_cache(model, ids, names=NAMES)``, T is
``bridge.run_with_cache(ids, names_filter=NAMES)``; each round's ratio is ``time_A / time_T``, the result the median,
with per-round wins / ties / losses (a tie within ``--tie-band``, 3 %). Goal: ``A / T <= 1.0`` (``--time-goal``).

**Memory**: the process's peak resident memory during a call above its resident memory just before (Linux:
``/proc/self/clear_refs`` resets the high-water mark ``VmHWM``; glibc's ``mmap`` threshold is fixed at 128 KiB
first, so that every larger tensor's memory is returned when freed, and ``malloc_trim(0)`` before each call returns
the smaller ones': the resident size follows the live tensors), the median of ``--memory-reps`` (3) calls each, for:
the plain forward pass (``model(ids)``, no hook), ``run_with_cache`` of the one layer, and of the same names in
every layer (``blocks.*.<name>``). The goal compares what caching adds: ``(one layer - plain) / (every layer -
plain) <= 1/10`` (``--memory-goal``). The peaks of the whole calls are printed too, and the bytes the caches hold
(their tensors' distinct storages): the forward pass's own memory (the ``[1, T, 49,152]`` logits first) is in both
calls, whether anything is cached or not, so their ratio says more about the vocabulary than about caching.

The script exits with status 1 when a goal is missed (with ``--quick`` only for a goal given on the command line:
a tiny model's numbers say nothing about the goals). Before starting, it checks that the machine is quiet
(1-minute load average and the spread of a short calibration loop, ``encoder_block.calibrate``) and prints a
``WARNING`` if it is not; the load is printed again at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
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
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from attnkit.nn.hooks import hook_points, run_with_cache
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.nn.hooks import hook_points, run_with_cache
from encoder_block import loadavg, quiet_check, rel_iqr
from generate_hf import SMOLLM2_135M

TINY = dict(SMOLLM2_135M, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
TIME_GOAL = 1.0
MEMORY_GOAL = 0.1
MIB = 1024 * 1024
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


# ------------------------------------------------------------------------------------------- memory


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None


def fix_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """glibc's ``mallopt(M_MMAP_THRESHOLD, threshold)``: every larger block gets its own map, returned when freed
    (the threshold no longer grows to the largest block freed). ``False`` where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def trim() -> None:
    """glibc's ``malloc_trim(0)``: the free memory of its heaps (smaller blocks, freed but still resident) goes back
    to the system, so that the resident size is the live memory; nothing elsewhere."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _status_kib(*keys: str) -> dict[str, int]:
    with open("/proc/self/status", encoding="ascii") as status:
        found = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in status) if k in keys}
    return found


def peak_added_bytes(fn: Callable[[], Any]) -> int:
    """The peak resident memory of the process while ``fn()`` runs (and its result is alive), above the resident
    memory just before; Linux only (it resets ``VmHWM`` through ``/proc/self/clear_refs``)."""
    gc.collect()
    trim()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")  # reset the high-water mark of the resident set to its current size
    except OSError as e:
        raise SystemExit(f"measuring peak memory needs Linux's /proc/self/clear_refs ({e}); run this on Linux") from e
    before = _status_kib("VmRSS")["VmRSS"]
    out = fn()
    peak = _status_kib("VmHWM")["VmHWM"]
    del out
    gc.collect()
    return (peak - before) * 1024


def cache_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages ``tensors`` keep alive (a view keeps all of its storage)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


# ------------------------------------------------------------------------------------------- timing


def time_paired(steps: dict[str, Callable[[], object]], rounds: int, inner: int) -> dict[str, list[float]]:
    """``rounds`` rounds of A and T, the order alternating (A T, T A, ...); within a round ``inner`` such pairs,
    each implementation's time being its fastest of them; seconds per call."""
    times: dict[str, list[float]] = {"A": [], "T": []}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            best = {"A": float("inf"), "T": float("inf")}
            for i in range(inner):
                for impl in ("A", "T") if (r + i) % 2 == 0 else ("T", "A"):
                    t0 = time.perf_counter()
                    steps[impl]()
                    best[impl] = min(best[impl], time.perf_counter() - t0)
            for impl, t in best.items():
                times[impl].append(t)
            print(
                f"...   round {r + 1}/{rounds}: A/T {times['A'][-1] / times['T'][-1]:.3f}", file=sys.stderr, flush=True
            )
    finally:
        gc.enable()
    return times


def verdict(ratio: float, band: float) -> str:
    """``win`` (attnkit faster than TransformerLens by more than ``band``), ``loss`` or ``tie``."""
    return "win" if ratio < 1 - band else "loss" if ratio > 1 + band else "tie"


def goal_results(goals: list[tuple[str, float | None, float]], checked: bool) -> list[dict[str, Any]]:
    """Each ``(name, measured, target)`` (``measured <= target`` passes; ``None``, nothing measured, fails) as a
    row: ``passed``, and ``checked`` (``False``: printed, not enforced)."""
    return [{"name": n, "measured": m, "target": t, "passed": m is not None and m <= t, "checked": checked}
            for n, m, t in goals]  # fmt: skip


def show(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# ------------------------------------------------------------------------------------------- the models


def save_tokenizer(folder: Path, vocab_size: int) -> None:
    """A word-level tokenizer (``t0`` .. ``t{V-1}``) in ``folder``: the bridge loads one, attnkit does not need it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t3"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=words, bos_token="t1", eos_token="t2", unk_token="t3", pad_token="t0"
    )
    fast.save_pretrained(folder)


def build(shape: dict[str, Any], seed: int) -> tuple[torch.nn.Module, Any]:
    """attnkit's model and TransformerLens' bridge over the same seeded random ``LlamaForCausalLM`` of ``shape``
    (saved once to a temporary folder, which both read)."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    from attnkit.interop import load_pretrained

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(LlamaConfig(**shape, bos_token_id=1, eos_token_id=2, pad_token_id=0)).float().eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        save_tokenizer(Path(folder), shape["vocab_size"])
        ours = load_pretrained(folder).model.eval()
        bridge = TransformerBridge.boot_transformers(folder, hf_model=hf)
    return ours, bridge


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny shape, 2 rounds: a smoke test")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (default 6, at least 6; 2 with --quick)")
    p.add_argument("--inner", type=int, default=None, help="A/T pairs per round, each its fastest (default 2; 1 quick)")
    p.add_argument("--memory-reps", type=int, default=None, help="calls per memory figure (default 3; 1 with --quick)")
    p.add_argument("--length", type=int, default=None, help="tokens of the input (default 128; 16 with --quick)")
    p.add_argument("--layer", type=int, default=None, help="the block cached (default: the middle one)")
    p.add_argument("--tie-band", type=float, default=0.03, help="a round within 1 +- this is a tie (default 0.03)")
    p.add_argument("--time-goal", type=float, default=None, help=f"largest median A/T that passes ({TIME_GOAL})")
    p.add_argument("--memory-goal", type=float, default=None, help=f"largest memory ratio that passes ({MEMORY_GOAL})")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 6)
    args.inner = args.inner or (1 if quick else 2)
    args.memory_reps = args.memory_reps or (1 if quick else 3)
    args.length = args.length or (16 if quick else 128)
    if args.rounds < (2 if quick else 6):
        p.error("--rounds must be at least 6 (2 with --quick): paired rounds alternate the order")
    for name in ("inner", "memory_reps", "length", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    args.checked = {}
    for name, default in (("time_goal", TIME_GOAL), ("memory_goal", MEMORY_GOAL)):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be a positive ratio")
        # --quick checks only a goal given on the command line: a tiny model's numbers say nothing about the goals
        args.checked[name] = not quick or getattr(args, name) is not None
        setattr(args, name, default if getattr(args, name) is None else getattr(args, name))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    shape = TINY if args.quick else SMOLLM2_135M
    layers = shape["num_hidden_layers"]
    layer = layers // 2 if args.layer is None else args.layer
    if not 0 <= layer < layers:
        raise SystemExit(f"--layer must be in 0..{layers - 1} (the model has {layers} blocks), got {layer}")
    if args.length > shape["max_position_embeddings"]:
        raise SystemExit(f"--length must be at most the context, {shape['max_position_embeddings']}")
    ncpu = os.cpu_count() or 1
    print("# run_with_cache of one layer: attnkit (A) vs TransformerLens (T), and its memory vs every layer")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, cpu_count={ncpu}, "
        f"threads={torch.get_num_threads()}, float32; model: {layers} layers, width {shape['hidden_size']}, "
        f"{shape['num_attention_heads']} heads / {shape['num_key_value_heads']} KV heads, feed-forward "
        f"{shape['intermediate_size']}, vocab {shape['vocab_size']:,}; 1 x {args.length} tokens, block {layer}"
        + (", QUICK (smoke test)" if args.quick else "")
    )
    load_start, calib, notes = quiet_check(args.threads)

    mmap_fixed = fix_mmap_threshold()
    ours, bridge = build(shape, args.seed)
    ids = torch.randint(3, shape["vocab_size"], (1, args.length), generator=torch.Generator().manual_seed(args.seed))
    with torch.no_grad():
        _, theirs = bridge.run_with_cache(ids)
    prefix = f"blocks.{layer}."
    names = [n for n in hook_points(ours) if n.startswith(prefix) and n in theirs]
    del theirs
    every = sorted({f"blocks.*.{n[len(prefix) :]}" for n in names})

    def attnkit_one() -> Any:
        return run_with_cache(ours, ids, names=names)

    def attnkit_every() -> Any:
        return run_with_cache(ours, ids, names=every)

    def tl_one() -> Any:
        with torch.no_grad():
            return bridge.run_with_cache(ids, names_filter=names)

    def plain() -> Any:
        with torch.no_grad():
            return ours(ids)

    a, (_, t) = attnkit_one(), tl_one()  # the parity check is also the warm-up
    worst = max(float((a[n] - t[n]).abs().max()) if a[n].shape == t[n].shape else float("inf") for n in names)
    if sorted(a) != sorted(names) or not set(names) <= set(t) or not worst <= 1e-4:
        print(
            f"FAIL: the caches differ: attnkit {sorted(a)}, TransformerLens {sorted(t)} (with its aliases), "
            f"largest difference {worst:.3g} (at most 1e-4)",
            file=sys.stderr,
        )
        return 1
    one_bytes, every_bytes = cache_bytes(list(a.values())), cache_bytes(list(attnkit_every().values()))
    del a, t
    print(f"... {len(names)} names of block {layer} cached alike (largest difference {worst:.2g}); "
          f"timing {args.rounds} paired rounds", file=sys.stderr, flush=True)  # fmt: skip

    times = time_paired({"A": attnkit_one, "T": tl_one}, args.rounds, args.inner)
    ratios = [ta / tt for ta, tt in zip(times["A"], times["T"])]
    verdicts = [verdict(x, args.tie_band) for x in ratios]
    calls = {"plain": plain, "one": attnkit_one, "every": attnkit_every}
    peaks = {k: statistics.median(peak_added_bytes(fn) for _ in range(args.memory_reps)) for k, fn in calls.items()}
    added = {k: max(peaks[k] - peaks["plain"], 0.0) for k in ("one", "every")}
    # None: nothing measurable (a tiny model's tensors stay below the mmap threshold, in memory already resident)
    memory_ratio = added["one"] / added["every"] if added["every"] > 0 else None
    whole_ratio = peaks["one"] / peaks["every"] if peaks["every"] > 0 else None
    time_ratio = statistics.median(ratios)
    load_end = loadavg()

    print("## Time: run_with_cache of one block's names (ms per call)")
    print()
    print("| A attnkit | T TransformerLens | A/T (median of paired rounds) | rounds | A wins / ties / T wins | names |")
    print("|---:|---:|---:|---:|---|---:|")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"| {med['A'] * 1e3:,.1f} | {med['T'] * 1e3:,.1f} | {time_ratio:.3f}x | {args.rounds} | "
          f"{verdicts.count('win')} / {verdicts.count('tie')} / {verdicts.count('loss')} | {len(names)} |")  # fmt: skip
    print()
    print(
        "A/T: per round, the time of A over the time of T (below 1: attnkit faster); a round within "
        f"+-{args.tie_band * 100:.0f} % is a tie. Per-round ratios: " + ", ".join(f"{x:.3f}" for x in ratios)
    )
    print()
    print("## Memory: peak resident memory of a call above the memory before it (MiB)")
    print()
    print("| call | peak of the call | added by caching | bytes the cache holds |")
    print("|---|---:|---:|---:|")
    held = {"plain": 0, "one": one_bytes, "every": every_bytes}
    what = {"plain": "model(ids), no hook", "one": f"run_with_cache, block {layer} ({len(names)} names)",
            "every": f"run_with_cache, every block ({len(names) * layers} names)"}  # fmt: skip
    for k in calls:
        extra = "" if k == "plain" else f"{added[k] / MIB:,.1f}"
        print(f"| {what[k]} | {peaks[k] / MIB:,.1f} | {extra} | {held[k] / MIB:,.1f} |")
    print()
    print(f"one block / every block: {show(memory_ratio)} of what caching adds (the goal), {show(whole_ratio)} of the "
          f"calls' peaks, {one_bytes / every_bytes:.3f} of the bytes held; the median of {args.memory_reps} calls "
          f"each; glibc's mmap threshold fixed: {'yes' if mmap_fixed else 'no (not glibc)'}")  # fmt: skip
    print()
    goals = goal_results(
        [("time: attnkit / TransformerLens run_with_cache", time_ratio, args.time_goal)], args.checked["time_goal"]
    )
    goals += goal_results(
        [("memory: one block / every block (added by caching)", memory_ratio, args.memory_goal)],
        args.checked["memory_goal"],
    )
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    for g in goals:
        result = ("PASS" if g["passed"] else "FAIL") if g["checked"] else "not checked (--quick)"
        unit = "x" if g["name"].startswith("time") else ""
        print(f"| {g['name']} | {show(g['measured'])}{unit} | <= {g['target']:.2f}{unit} | {result} |")
    print()
    print(f"{sum(g['passed'] for g in goals)}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in notes:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses a tiny model and few rounds; its numbers say nothing about the goals.")
    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpu_count": ncpu,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "model": shape,
                "length": args.length,
                "layer": layer,
                "names": names,
                "max_difference": worst,
                "rounds": args.rounds,
                "inner": args.inner,
                "tie_band": args.tie_band,
                "mmap_threshold_fixed": mmap_fixed,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": notes,
            },
            "time": {
                "times_s": times,
                "ratios": ratios,
                "median_ratio": time_ratio,
                "rel_iqr": {k: rel_iqr(v) for k, v in times.items()},
                "wins": verdicts.count("win"),
                "ties": verdicts.count("tie"),
                "losses": verdicts.count("loss"),
            },
            "memory": {
                "peak_bytes": peaks,
                "added_bytes": added,
                "cache_bytes": held,
                "ratio": memory_ratio,
                "whole_call_ratio": whole_ratio,
                "reps": args.memory_reps,
            },
            "goals": goals,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    missed = [g for g in goals if g["checked"] and not g["passed"]]
    if missed:
        text = "; ".join(f"{g['name']} {show(g['measured'])} > {g['target']:.2f}" for g in missed)
        print(f"FAIL: goal missed: {text}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
