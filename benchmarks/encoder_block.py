"""Benchmark: attnkit ``EncoderBlock`` against a tutorial-style explicit block and ``torch.nn``.

Run::

    .venv/bin/python benchmarks/encoder_block.py                # full run, 1 thread
    .venv/bin/python benchmarks/encoder_block.py --threads 2    # both cores (noisy on a shared machine)
    .venv/bin/python benchmarks/encoder_block.py --quick        # tiny sizes, a few reps: a smoke test
    .venv/bin/python benchmarks/encoder_block.py --json out.json

Implementations (all post-norm, ReLU, ``dropout=0.0``, float32, batch-first; all share the same
weights, so they compute the same function, and the script checks that before timing):

* **A**  ``attnkit.nn.EncoderBlock`` called as ``block(x)``: the fused path (``need_weights=False``
  runs ``torch.nn.functional.scaled_dot_product_attention``).
* **A'** the same block called as ``block(x, need_weights=True)``: attnkit's explicit path, which
  materialises the attention weights.
* **B**  a tutorial-style explicit block (below, :class:`TutorialEncoderBlock`), mirroring the UvA
  deep-learning course's Transformer tutorial: one fused QKV ``nn.Linear``, reshape to heads,
  ``q @ k.transpose(-2, -1) / sqrt(d)``, ``masked_fill(mask == 0, -9e15)`` only when a mask is given,
  softmax, ``@ v``, output projection; then residual + LayerNorm, Linear-Dropout-ReLU-Linear,
  residual + LayerNorm.
* **C**  ``torch.nn.TransformerEncoderLayer(..., batch_first=True)``: train mode for training;
  eval mode under ``torch.inference_mode()`` for inference, where it takes its native fast path
  (``torch._transformer_encoder_layer_fwd``). For causal inference it gets the float causal
  ``src_mask`` plus ``is_causal=True`` (its fast path then uses the mask).

Modes: *train* (train mode, forward + backward of the block output against a fixed random
gradient; the input requires grad, as it would inside a stack), *infer* (eval mode, under
``torch.inference_mode()``), *causal infer* (as *infer*, with a causal mask: ``is_causal=True``
for attnkit, a ``[T, T]`` lower-triangular 0/1 mask for the tutorial block).

Timing: ``torch.set_num_threads(--threads)``; warm-up calls of every implementation, then
``reps`` rounds in which every implementation runs once, in an order rotated every round
(round-robin), so that machine noise (other processes, frequency changes) hits all of them alike.
Throughput is ``B * T / median(time of one call)`` in tokens/s. A ratio such as ``A/B`` is the
median over rounds of ``time_B / time_A`` *within the same round* (a paired ratio): the two calls
ran at most a few seconds apart, so load that comes and goes between rounds cancels out, while the
ratio of the two medians (also written to the JSON, as ``ratio_of_medians``) can be skewed by it;
on a quiet machine the two agree within about 2%.
The garbage collector is off while timing. ``noise`` in the table is the largest interquartile
range of the per-call times of a row, relative to its median.

Memory (one training step at the long configuration, ``B=8, T=512``), two measurements:

* **profiler peak added** (the one the goal uses): ``torch.profiler.profile(profile_memory=True)``
  records every allocation and free of PyTorch's CPU allocator with a timestamp; the running sum
  of those events over one forward + backward (parameter gradients freed beforehand) has a
  maximum, which is the peak memory the step adds on top of what existed before it (parameters,
  input). This is what matters on CPU: the process RSS (``ru_maxrss``) mixes in the allocator's
  and Python's caching and the baseline of the interpreter and is not attributable, and the sum
  of the profiler's per-op "self CPU memory" counts memory freed again in between, so it is not
  a peak.
* **saved for backward**: the bytes of distinct storages that autograd keeps between forward and
  backward, counted with ``torch.autograd.graph.saved_tensors_hooks`` (parameters and the input
  excluded). It is deterministic and explains the peak: the explicit implementations keep the
  ``[B, H, T, T]`` attention weights (``B*H*T*T*4`` bytes = 64 MiB at ``B=8, H=8, T=512``) for the
  backward pass, the fused kernel only ``q, k, v``, its output and a ``[B, H, T]`` log-sum-exp.

Before starting, the script checks that the machine is quiet: the 1-minute load average (from
``os.getloadavg()``) and the spread of a short calibration loop (a fixed matmul, timed repeatedly);
if either looks busy it prints a ``WARNING`` line. The load average is printed again at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from attnkit.nn import BlockSpec, EncoderBlock
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.nn import BlockSpec, EncoderBlock


# --------------------------------------------------------------------------------------------
# B: the tutorial-style explicit implementation (the reference being compared against)
# --------------------------------------------------------------------------------------------


def tutorial_scaled_dot_product(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    d_k = q.size()[-1]
    attn_logits = torch.matmul(q, k.transpose(-2, -1))
    attn_logits = attn_logits / math.sqrt(d_k)
    if mask is not None:
        attn_logits = attn_logits.masked_fill(mask == 0, -9e15)
    attention = F.softmax(attn_logits, dim=-1)
    values = torch.matmul(attention, v)
    return values, attention


def tutorial_expand_mask(mask: Tensor) -> Tensor:
    """``[T, T]`` or ``[B, T, T]`` -> 4-D, as the tutorial's helper of the same purpose."""
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)
    while mask.ndim < 4:
        mask = mask.unsqueeze(0)
    return mask


class TutorialMultiheadAttention(nn.Module):
    def __init__(self, input_dim: int, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        assert embed_dim % num_heads == 0, "Embedding dimension must be 0 modulo number of heads."
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.qkv_proj = nn.Linear(input_dim, 3 * embed_dim)
        self.o_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        batch_size, seq_length, _ = x.size()
        if mask is not None:
            mask = tutorial_expand_mask(mask)
        qkv = self.qkv_proj(x)
        qkv = qkv.reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        qkv = qkv.permute(0, 2, 1, 3)  # [Batch, Head, SeqLen, 3 * Dims]
        q, k, v = qkv.chunk(3, dim=-1)
        values, attention = tutorial_scaled_dot_product(q, k, v, mask=mask)
        values = values.permute(0, 2, 1, 3)  # [Batch, SeqLen, Head, Dims]
        values = values.reshape(batch_size, seq_length, self.embed_dim)
        o = self.o_proj(values)
        if return_attention:
            return o, attention
        return o


class TutorialEncoderBlock(nn.Module):
    def __init__(self, input_dim: int, num_heads: int, dim_feedforward: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attn = TutorialMultiheadAttention(input_dim, input_dim, num_heads)
        self.linear_net = nn.Sequential(
            nn.Linear(input_dim, dim_feedforward),
            nn.Dropout(dropout),
            nn.ReLU(inplace=True),
            nn.Linear(dim_feedforward, input_dim),
        )
        self.norm1 = nn.LayerNorm(input_dim)
        self.norm2 = nn.LayerNorm(input_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        attn_out = self.self_attn(x, mask=mask)
        x = x + self.dropout(attn_out)
        x = self.norm1(x)
        linear_out = self.linear_net(x)
        x = x + self.dropout(linear_out)
        x = self.norm2(x)
        return x


# --------------------------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------------------------

IMPLS = ("A", "A'", "B", "C")
RATIOS = (("A", "B"), ("A", "C"), ("A'", "B"))
IMPL_NAMES = {
    "A": "A attnkit",
    "A'": "A' attnkit need_weights",
    "B": "B tutorial explicit",
    "C": "C torch TEL",
}


@dataclass
class Config:
    name: str  # "short" / "long"
    batch: int
    seq: int
    d_model: int
    heads: int
    ff: int

    @property
    def label(self) -> str:
        return f"B={self.batch} T={self.seq}"

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


@dataclass
class Blocks:
    attnkit: EncoderBlock
    tutorial: TutorialEncoderBlock
    torch_layer: nn.TransformerEncoderLayer
    causal_01: Tensor  # [T, T] 1 = may attend (the tutorial's convention)
    causal_float: Tensor  # [T, T] 0 / -inf (torch.nn's convention)

    def modules(self) -> list[nn.Module]:
        return [self.attnkit, self.tutorial, self.torch_layer]

    def call(self, impl: str, x: Tensor, causal: bool) -> Tensor:
        if impl == "A":
            return self.attnkit(x, is_causal=causal)[0]
        if impl == "A'":
            return self.attnkit(x, is_causal=causal, need_weights=True)[0]
        if impl == "B":
            return self.tutorial(x, mask=self.causal_01 if causal else None)
        if impl == "C":
            if causal:
                return self.torch_layer(x, src_mask=self.causal_float, is_causal=True)
            return self.torch_layer(x)
        raise KeyError(impl)


def build_blocks(cfg: Config) -> Blocks:
    """Three blocks with the same weights (the tutorial's QKV layout is per head: [H, 3, hd])."""
    d, h, hd = cfg.d_model, cfg.heads, cfg.d_model // cfg.heads
    a = EncoderBlock(BlockSpec(d, h, cfg.ff, dropout=0.0))
    b = TutorialEncoderBlock(d, h, cfg.ff, dropout=0.0)
    c = nn.TransformerEncoderLayer(d, h, cfg.ff, dropout=0.0, batch_first=True)
    with torch.no_grad():
        w_in, b_in = a.self_attn.in_proj.weight, a.self_attn.in_proj.bias
        b.self_attn.qkv_proj.weight.copy_(w_in.view(3, h, hd, d).transpose(0, 1).reshape(3 * d, d))
        b.self_attn.qkv_proj.bias.copy_(b_in.view(3, h, hd).transpose(0, 1).reshape(3 * d))
        b.self_attn.o_proj.load_state_dict(a.self_attn.out_proj.state_dict())
        b.linear_net[0].load_state_dict(a.ff.linear1.state_dict())
        b.linear_net[3].load_state_dict(a.ff.linear2.state_dict())
        c.self_attn.in_proj_weight.copy_(w_in)
        c.self_attn.in_proj_bias.copy_(b_in)
        c.self_attn.out_proj.load_state_dict(a.self_attn.out_proj.state_dict())
        c.linear1.load_state_dict(a.ff.linear1.state_dict())
        c.linear2.load_state_dict(a.ff.linear2.state_dict())
        for blk in (b, c):
            blk.norm1.load_state_dict(a.norm1.state_dict())
            blk.norm2.load_state_dict(a.norm2.state_dict())
    t = cfg.seq
    causal_01 = torch.ones(t, t).tril()
    causal_float = nn.Transformer.generate_square_subsequent_mask(t)
    return Blocks(a, b, c, causal_01, causal_float)


def check_parity(blocks: Blocks, cfg: Config) -> float:
    """Max |difference| of every implementation's output from A's (eval; no mask and causal)."""
    x = torch.randn(2, cfg.seq, cfg.d_model)
    for m in blocks.modules():
        m.eval()
    worst = 0.0
    with torch.inference_mode():
        for causal in (False, True):
            ref = blocks.call("A", x, causal)
            for impl in IMPLS[1:]:
                worst = max(worst, (blocks.call(impl, x, causal) - ref).abs().max().item())
    return worst


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def make_step(blocks: Blocks, impl: str, mode: str, x: Tensor, grad_out: Tensor) -> Callable[[], None]:
    if mode == "train":
        params = [p for m in blocks.modules() for p in m.parameters()]

        def step() -> None:
            out = blocks.call(impl, x, False)
            out.backward(grad_out)

        def reset() -> None:
            for p in params:
                p.grad = None
            x.grad = None

        step.reset = reset  # type: ignore[attr-defined]
        return step

    causal = mode == "causal infer"

    def infer() -> None:
        with torch.inference_mode():
            blocks.call(impl, x, causal)

    infer.reset = lambda: None  # type: ignore[attr-defined]
    return infer


def time_interleaved(
    steps: dict[str, Callable[[], None]], *, warmup: int, reps: int | None, budget_s: float, min_reps: int
) -> dict[str, list[float]]:
    """Warm up, then ``reps`` round-robin rounds (order rotated every round); per-call seconds."""
    names = list(steps)
    round_s = 0.0
    for _ in range(warmup):
        t_round = time.perf_counter()
        for n in names:
            steps[n].reset()  # type: ignore[attr-defined]
            steps[n]()
        round_s = time.perf_counter() - t_round
    if reps is None:
        reps = max(min_reps, min(200, math.ceil(budget_s / max(round_s, 1e-6))))
    times: dict[str, list[float]] = {n: [] for n in names}
    gc.collect()
    gc.disable()
    try:
        for r in range(reps):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                steps[n].reset()  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                steps[n]()
                times[n].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return times


def rel_iqr(xs: list[float]) -> float:
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / statistics.median(xs)


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def memory_of_training_step(blocks: Blocks, impl: str, x: Tensor, grad_out: Tensor) -> dict[str, float]:
    """Peak bytes added during one forward + backward (profiler) and bytes saved for backward."""
    from torch.profiler import ProfilerActivity, profile

    for m in blocks.modules():
        m.train()
    module = {"A": blocks.attnkit, "A'": blocks.attnkit, "B": blocks.tutorial, "C": blocks.torch_layer}[impl]
    excluded = {p.untyped_storage().data_ptr() for p in module.parameters()} | {x.untyped_storage().data_ptr()}

    def clear() -> None:
        for p in module.parameters():
            p.grad = None
        x.grad = None
        gc.collect()

    # bytes of distinct storages kept for backward
    clear()
    saved: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in excluded:
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = blocks.call(impl, x, False)
    out.backward(grad_out)
    del out

    # profiler: running sum of allocations / frees over the step
    clear()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = blocks.call(impl, x, False)
        out.backward(grad_out)
        del out
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch._C._autograd.DeviceType.CPU
    )
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    clear()
    return {"profiler_peak_bytes": float(peak), "saved_for_backward_bytes": float(sum(saved.values()))}


# --------------------------------------------------------------------------------------------
# Machine state
# --------------------------------------------------------------------------------------------


def calibrate(threads: int) -> dict[str, float]:
    """Time a fixed matmul workload repeatedly; a busy machine shows as spread between runs."""
    a = torch.randn(192, 192)
    for _ in range(20):
        a @ a
    samples = []
    for _ in range(25):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        samples.append(time.perf_counter() - t0)
    med = statistics.median(samples)
    return {
        "median_s": med,
        "min_s": min(samples),
        "rel_iqr": rel_iqr(samples),
        "max_over_min": max(samples) / min(samples),
    }


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:  # not available on this platform
        return (float("nan"),) * 3


def quiet_check(threads: int) -> tuple[tuple[float, float, float], dict[str, float], list[str]]:
    """Print the load average and a calibration loop's spread, and a ``WARNING`` line for each sign that the
    machine is not quiet; returns ``(load average at start, the calibration, the warnings)`` (print the warnings
    again at the end)."""
    load_start = loadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    calib = calibrate(threads)
    print(
        f"calibration (192x192 matmul x20, 25 samples): median {calib['median_s'] * 1e3:.2f} ms, "
        f"IQR {calib['rel_iqr'] * 100:.1f}%, max/min {calib['max_over_min']:.2f}"
    )
    notes = []
    if load_start[0] > 0.5 * (os.cpu_count() or 1):
        notes.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        notes.append("the calibration loop's timings spread widely: another process is using the CPU")
    for w in notes:
        print(f"WARNING: {w}")
    print()
    return load_start, calib, notes


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


@dataclass
class Goal:
    name: str
    measured: float
    target: float
    op: str  # ">=" or "<="
    unit: str = "x"
    info: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.measured >= self.target if self.op == ">=" else self.measured <= self.target


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and a few reps: a smoke test, not a measurement")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--reps", type=int, default=None, help="rounds per row (default: enough to fill --budget)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up rounds per row (default 3; 1 with --quick)")
    p.add_argument("--budget", type=float, default=25.0, help="target seconds of timing per row (default 25)")
    p.add_argument("--min-reps", type=int, default=15, help="at least this many rounds per row (default 15)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    ncpu = os.cpu_count() or 1
    load_start = loadavg()

    if args.quick:
        d, h, ff = 32, 4, 64
        configs = [Config("short", 4, 16, d, h, ff), Config("long", 2, 64, d, h, ff)]
        warmup = 1 if args.warmup is None else args.warmup
        reps, budget, min_reps = (args.reps or 3), 0.0, 1
    else:
        d, h, ff = 256, 8, 1024
        configs = [Config("short", 32, 128, d, h, ff), Config("long", 8, 512, d, h, ff)]
        warmup = 3 if args.warmup is None else args.warmup
        reps, budget, min_reps = args.reps, args.budget, args.min_reps
    long_cfg = configs[-1]

    print("# attnkit EncoderBlock benchmark")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
        f"cpu_count={ncpu}, threads={torch.get_num_threads()}, float32, "
        f"d_model={d}, heads={h}, dim_feedforward={ff}, dropout=0.0, post-norm"
        + (", QUICK (smoke test)" if args.quick else "")
    )
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    calib = calibrate(args.threads)
    print(
        f"calibration (192x192 matmul x20, 25 samples): median {calib['median_s'] * 1e3:.2f} ms, "
        f"IQR {calib['rel_iqr'] * 100:.1f}%, max/min {calib['max_over_min']:.2f}"
    )
    warnings = []
    if load_start[0] > 0.5:
        warnings.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        warnings.append("the calibration loop's timings spread widely: another process is using the CPU")
    if args.threads > 1:
        warnings.append(
            f"{args.threads} threads on a {ncpu}-core machine: any other process that takes a core stalls the "
            "whole OpenMP team at every barrier, so timings on a shared machine degrade badly; trust --threads 1"
        )
    if args.threads > ncpu:
        warnings.append(f"more threads ({args.threads}) than cores ({ncpu})")
    for w in warnings:
        print(f"WARNING: {w}")
    print()

    modes_for = {"short": ["train", "infer"], "long": ["train", "infer", "causal infer"]}
    rows = []
    parity = {}
    memory: dict[str, dict[str, float]] = {}
    for cfg in configs:
        torch.manual_seed(args.seed)
        blocks = build_blocks(cfg)
        parity[cfg.label] = check_parity(blocks, cfg)
        x = torch.randn(cfg.batch, cfg.seq, cfg.d_model)
        grad_out = torch.randn(cfg.batch, cfg.seq, cfg.d_model)
        for mode in modes_for[cfg.name]:
            for m in blocks.modules():
                m.train(mode == "train")
            xin = x.clone().requires_grad_(mode == "train")
            steps = {impl: make_step(blocks, impl, mode, xin, grad_out) for impl in IMPLS}
            times = time_interleaved(steps, warmup=warmup, reps=reps, budget_s=budget, min_reps=min_reps)
            med = {impl: statistics.median(ts) for impl, ts in times.items()}
            rows.append(
                {
                    "config": cfg.label,
                    "config_name": cfg.name,
                    "mode": mode,
                    "batch": cfg.batch,
                    "seq": cfg.seq,
                    "reps": len(times["A"]),
                    "median_s": med,
                    "tokens_per_s": {impl: cfg.tokens / med[impl] for impl in IMPLS},
                    "rel_iqr": {impl: rel_iqr(ts) for impl, ts in times.items()},
                    "paired_ratios": {
                        f"{a}/{b}": statistics.median(tb / ta for ta, tb in zip(times[a], times[b])) for a, b in RATIOS
                    },
                    "ratio_of_medians": {f"{a}/{b}": med[b] / med[a] for a, b in RATIOS},
                    "times_s": times,
                }
            )
            print(f"... {cfg.label} {mode}: done ({len(times['A'])} rounds)", file=sys.stderr, flush=True)
        if cfg is long_cfg:
            xin = x.clone().requires_grad_(True)
            for impl in IMPLS:
                memory[impl] = memory_of_training_step(blocks, impl, xin, grad_out)
        del blocks

    load_end = loadavg()

    def ratio(row: dict, a: str, b: str) -> float:
        """Throughput of ``a`` over ``b``: the median of the per-round paired time ratios."""
        return row["paired_ratios"][f"{a}/{b}"]

    # --- throughput table
    print(f"## Throughput: tokens/s (B*T / median time of one call), {torch.get_num_threads()} thread(s)")
    print()
    heads = ["config", "mode", *(IMPL_NAMES[i] for i in IMPLS), "A/B", "A/C", "A'/B", "rounds", "noise"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(heads) - 2)) + "|")
    for row in rows:
        tps = [f"{row['tokens_per_s'][i]:,.0f}" for i in IMPLS]
        noise = max(row["rel_iqr"].values())
        cells = [row["config"], row["mode"], *tps]
        cells += [f"{ratio(row, a, b):.2f}x" for a, b in RATIOS]
        cells += [str(row["reps"]), f"{noise * 100:.0f}%"]
        print("| " + " | ".join(cells) + " |")
    print()
    print(
        "A = attnkit EncoderBlock (fused SDPA), A' = same block with need_weights=True (explicit path), "
        "B = tutorial-style explicit block, C = torch.nn.TransformerEncoderLayer (train mode / eval fast path). "
        "Ratios: median over rounds of the paired per-round time ratio (see the docstring). "
        "noise = largest IQR/median of the row's per-call times."
    )
    print("outputs agree with A (max |diff|, eval): " + ", ".join(f"{k}: {v:.1e}" for k, v in parity.items()))
    print()

    # --- memory table
    mib = 2.0**20
    print(f"## Memory of one training step ({long_cfg.label})")
    print()
    print("| impl | profiler peak added (MiB) | saved for backward (MiB) | peak / B's |")
    print("|---|---:|---:|---:|")
    for impl in IMPLS:
        m = memory[impl]
        rel = m["profiler_peak_bytes"] / memory["B"]["profiler_peak_bytes"]
        print(
            f"| {IMPL_NAMES[impl]} | {m['profiler_peak_bytes'] / mib:.1f} | {m['saved_for_backward_bytes'] / mib:.1f} "
            f"| {rel:.2f}x |"
        )
    print()
    print(
        "profiler peak added = max of the running sum of CPU allocations minus frees recorded by "
        "torch.profiler(profile_memory=True) over forward + backward; saved for backward = bytes of distinct "
        "storages kept by autograd (saved_tensors_hooks), parameters and input excluded."
    )
    print()

    # --- goals
    by = {(r["config_name"], r["mode"]): r for r in rows}
    lg = long_cfg.label
    goals = [
        Goal(f"{lg} training: A / B", ratio(by["long", "train"], "A", "B"), 1.6, ">="),
        Goal(f"{lg} inference: A / B", ratio(by["long", "infer"], "A", "B"), 2.0, ">="),
        Goal(f"{lg} causal inference: A / B", ratio(by["long", "causal infer"], "A", "B"), 2.5, ">="),
    ]
    for cfg in configs:
        for mode, what in (("train", "training (C train mode)"), ("infer", "inference (C eval fast path)")):
            goals.append(Goal(f"{cfg.label} {what}: A / C", ratio(by[cfg.name, mode], "A", "C"), 1.0, ">="))
    for row in rows:
        goals.append(Goal(f"{row['config']} {row['mode']}: A' / B (need_weights)", ratio(row, "A'", "B"), 0.95, ">="))
    goals.append(
        Goal(
            f"{lg} training-step peak memory: A / B",
            memory["A"]["profiler_peak_bytes"] / memory["B"]["profiler_peak_bytes"],
            0.55,
            "<=",
        )
    )
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    for g in goals:
        verdict = "PASS" if g.passed else "FAIL"
        print(f"| {g.name} | {g.measured:.2f}{g.unit} | {g.op} {g.target:.2f}{g.unit} | {verdict} |")
    print()
    n_pass = sum(g.passed for g in goals)
    print(f"{n_pass}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in warnings:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses tiny sizes and a few reps; its numbers say nothing about the goals.")

    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpu_count": ncpu,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "d_model": d,
                "heads": h,
                "dim_feedforward": ff,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": warnings,
                "parity_max_abs_diff": parity,
            },
            "throughput": rows,
            "memory": memory,
            "goals": [
                {"name": g.name, "measured": g.measured, "target": g.target, "op": g.op, "passed": g.passed}
                for g in goals
            ],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
