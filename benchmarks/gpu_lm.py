"""Benchmark (GPU): training throughput and model FLOP utilisation (MFU) of attnkit's ``LanguageModel``
at GPT-2-small size, eager against ``torch.compile``, and which fused attention kernel runs.

Run on a CUDA machine::

    python benchmarks/gpu_lm.py                 # GPT-2 small: 12 layers, width 768, 12 heads, context 1024
    python benchmarks/gpu_lm.py --quick         # tiny sizes, 2 rounds: a smoke test (runs on the CPU too)
    python benchmarks/gpu_lm.py --json out.json

What it does, in one run:

1. **Ceiling.** The bf16 rate of a large matrix product (8192³, random data) on this GPU: the
   measured ceiling MFU is also given against (beside the datasheet's dense bf16 989.5 TFLOP/s).
2. **Attention kernel.** One forward and backward of :class:`attnkit.nn.MultiHeadAttention` (causal,
   bf16, ``[8, 1024, 768]``, 12 heads) under the PyTorch profiler: the CUDA kernels it launched are
   searched for a fused attention kernel (flash, memory-efficient/cutlass ``fmha`` or cuDNN). The
   check **fails** if none ran (the math fallback would be a silent 3-5× slowdown). The explicit path
   (``need_weights=True``) must give the same output within bf16 rounding.
3. **Training.** The same initial weights train in two copies: ``E`` eager and ``C`` =
   ``torch.compile(model)``; AdamW (fused), bf16 autocast, batches ``[--batch, 1024]`` of random token
   ids (throughput does not depend on the data). The first losses of E and C must agree (same weights,
   same batch) or the check fails. Then ``--rounds`` paired rounds (order alternating), each timing
   ``--steps`` optimiser steps of E and of C with ``torch.cuda.synchronize()`` around them.
   ``tokens/s = batch * 1024 * steps / median time``; the speed-up is the median of the per-round
   ratios, with per-round wins.

MFU follows nanoGPT / the PaLM paper: ``flops per token = 6 N + 12 L H Q T`` (N parameters without the
position table, L layers, H heads, Q head width, T context; the attention term counts the full
``T x T`` score matrix, as the convention does, although a causal flash kernel skips half of it),
times tokens/s, over the peak.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    from attnkit.models import LanguageModel, LanguageModelConfig
    from attnkit.nn import MultiHeadAttention
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.models import LanguageModel, LanguageModelConfig
    from attnkit.nn import MultiHeadAttention

DATASHEET_BF16_TFLOPS = 989.5  # H100/H200 SXM, dense bf16
FUSED_KERNEL_MARKERS = ("flash", "fmha", "efficient_attention", "cudnn", "sdpa")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_ceiling(device: torch.device, size: int = 8192, reps: int = 10) -> float | None:
    """Measured bf16 TFLOP/s of a ``size``³ product on random data (median of ``reps``)."""
    if device.type != "cuda":
        return None
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * size**3 / statistics.median(times) / 1e12


def attention_kernels(device: torch.device, width: int, heads: int, length: int) -> tuple[list[str], float]:
    """Kernels launched by one causal fused attention forward+backward, and max |fused - explicit|."""
    mha = MultiHeadAttention(width, heads, dropout=0.0).to(device)
    x = torch.randn(8, length, width, device=device, requires_grad=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        out, _ = mha(x, is_causal=True)  # warm-up
        out.float().sum().backward()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            out, _ = mha(x, is_causal=True)
            out.float().sum().backward()
            sync(device)
        with torch.no_grad():
            fused, _ = mha(x, is_causal=True)
            explicit, weights = mha(x, is_causal=True, need_weights=True)
    assert weights is not None
    names = sorted({evt.key for evt in prof.key_averages()})
    diff = (fused.float() - explicit.float()).abs().max().item()
    return names, diff


def flops_per_token(model: LanguageModel) -> float:
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    if model.positional is not None:
        n -= sum(p.numel() for p in model.positional.parameters())
    head_dim = c.head_dim or c.d_model // c.num_heads
    return 6 * n + 12 * c.num_layers * c.num_heads * head_dim * c.max_len


def train_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, batches: list[torch.Tensor], device) -> float:
    """Run one optimiser step per batch; returns the last loss."""
    loss = torch.zeros(())
    for ids in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 2 rounds (a smoke test)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10, help="optimiser steps per variant per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-compile", action="store_true", help="time the eager model only")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.quick:
        layers, width, heads, context, vocab = 2, 64, 4, 64, 256
        args.batch, args.steps, args.rounds = 2, 2, 2
    else:
        layers, width, heads, context, vocab = 12, 768, 12, 1024, 50304
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    else:
        print(f"device: CPU (no CUDA); torch {torch.__version__}; figures are not GPU figures")
    failures: list[str] = []

    ceiling = matmul_ceiling(device)
    if ceiling is not None:
        print(f"bf16 8192^3 matmul: {ceiling:.0f} TFLOP/s (datasheet dense bf16 {DATASHEET_BF16_TFLOPS})")

    names, attn_diff = attention_kernels(device, width, heads, context)
    fused = [n for n in names if any(m in n.lower() for m in FUSED_KERNEL_MARKERS)]
    print(f"fused attention kernels: {fused or 'NONE'}; max |fused - explicit| = {attn_diff:.2e}")
    if device.type == "cuda" and not [
        n
        for n in fused
        if "flash" in n.lower() or "fmha" in n.lower() or "efficient" in n.lower() or "cudnn" in n.lower()
    ]:
        failures.append("no flash / memory-efficient / cuDNN attention kernel ran")
    if attn_diff > (5e-2 if device.type == "cuda" else 1e-5):
        failures.append(f"fused and explicit attention differ by {attn_diff:.2e}")

    cfg = LanguageModelConfig(
        vocab_size=vocab,
        d_model=width,
        num_heads=heads,
        num_layers=layers,
        dim_feedforward=4 * width,
        dropout=0.0,
        activation="gelu_tanh",
        max_len=context,
        positional="learned",
    )
    torch.manual_seed(0)
    eager = LanguageModel(cfg).to(device)
    variants: dict[str, torch.nn.Module] = {"E": eager}
    if not args.no_compile:
        variants["C"] = torch.compile(copy.deepcopy(eager))
    fused_opt = device.type == "cuda"
    opts = {k: torch.optim.AdamW(m.parameters(), lr=3e-4, fused=fused_opt) for k, m in variants.items()}
    n_params = sum(p.numel() for p in eager.parameters())
    fpt = flops_per_token(eager)
    print(
        f"model: {layers} layers, width {width}, {heads} heads, context {context}, vocab {vocab}: "
        f"{n_params / 1e6:.1f} M parameters, {fpt / 1e9:.2f} GFLOP per token"
    )

    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, vocab, (args.batch, context + 1), generator=gen).to(device) for _ in range(args.steps)]
    first: dict[str, float] = {}
    warm: dict[str, float] = {}
    for key, model in variants.items():
        sync(device)
        t0 = time.perf_counter()
        first[key] = train_steps(model, opts[key], batches[:1], device)
        train_steps(model, opts[key], batches[1:3], device)
        sync(device)
        warm[key] = time.perf_counter() - t0
    print(
        "first loss: "
        + ", ".join(f"{k} {v:.4f}" for k, v in first.items())
        + " | warm-up (incl. compilation): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in warm.items())
    )
    if "C" in first and abs(first["C"] - first["E"]) > 2e-2:
        failures.append(f"eager and compiled first losses differ: {first['E']:.4f} vs {first['C']:.4f}")

    times: dict[str, list[float]] = {k: [] for k in variants}
    keys = list(variants)
    for r in range(args.rounds):
        for key in keys if r % 2 == 0 else keys[::-1]:
            sync(device)
            t0 = time.perf_counter()
            train_steps(variants[key], opts[key], batches, device)
            sync(device)
            times[key].append(time.perf_counter() - t0)
    tokens = args.batch * context * args.steps
    result: dict[str, object] = {
        "device": str(device),
        "ceiling_tflops": ceiling,
        "fused_kernels": fused,
        "params": n_params,
        "flops_per_token": fpt,
        "batch": args.batch,
    }
    print(f"\n{'variant':<10}{'tokens/s':>12}{'TFLOP/s':>10}{'MFU (datasheet)':>17}{'MFU (measured peak)':>21}")
    for key in keys:
        tps = tokens / statistics.median(times[key])
        achieved = tps * fpt / 1e12
        mfu = achieved / DATASHEET_BF16_TFLOPS
        mfu_measured = achieved / ceiling if ceiling else float("nan")
        name = {"E": "eager", "C": "compiled"}[key]
        print(f"{name:<10}{tps:>12,.0f}{achieved:>10.1f}{mfu:>16.1%}{mfu_measured:>21.1%}")
        result[name] = {
            "tokens_per_s": tps,
            "tflops": achieved,
            "mfu": mfu,
            "mfu_measured_peak": mfu_measured,
            "times": times[key],
        }
    if "C" in times:
        ratios = [e / c for e, c in zip(times["E"], times["C"], strict=True)]
        wins = sum(x > 1.02 for x in ratios)
        ties = sum(0.98 <= x <= 1.02 for x in ratios)
        speedup = statistics.median(ratios)
        print(
            f"\ntorch.compile speed-up: {speedup:.2f}x (median of {len(ratios)} paired rounds; "
            f"compiled faster in {wins}, tied (±2%) in {ties}, slower in {len(ratios) - wins - ties})"
        )
        result["compile_speedup"] = speedup
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
