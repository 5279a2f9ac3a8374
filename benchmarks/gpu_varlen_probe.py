"""What variable-length attention would buy packed instruction tuning on this GPU (a probe; CUDA only).

Packed rows (several conversations in one row) need attention kept inside each document. attnkit runs them through
``scaled_dot_product_attention`` with a block-diagonal boolean mask (``nn.masks.document_mask``), which rules out
the FlashAttention kernel. This probe times, on one packed batch of SmolLM2-135M's attention shape (9 query heads,
3 key/value heads, head size 64) with long-tailed document lengths, forward + backward in bfloat16:

* ``masked SDPA``: what attnkit runs today (mask ``[B, 1, T, T]``, causal and block-diagonal);
* ``varlen``: ``torch.nn.attention.varlen.varlen_attn`` on the same tokens (cumulative lengths, causal);
* ``causal SDPA``: one causal mask over whole rows (wrong for packing: the lower bound on time).

It checks that varlen's output equals the masked SDPA's within bf16 tolerance, and prints ms per call and ratios::

    python benchmarks/gpu_varlen_probe.py [--rows 16] [--context 1024]
"""

from __future__ import annotations

import argparse
import inspect
import math
import random
import sys
import time

import torch
import torch.nn.functional as F


def lengths(rows: int, context: int, seed: int = 0) -> list[list[int]]:
    """Each row filled with documents of log-uniform lengths in [64, context] (the last one cut to fit)."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        row, left = [], context
        while left > 0:
            n = min(left, int(math.exp(rng.uniform(math.log(64), math.log(context)))))
            row.append(n)
            left -= n
        out.append(row)
    return out


def timed(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--context", type=int, default=1024)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: varlen attention runs on CUDA only", file=sys.stderr)
        return 2
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as err:
        print(f"torch {torch.__version__} has no torch.nn.attention.varlen ({err})")
        return 1
    params = inspect.signature(varlen_attn).parameters
    print(f"# {torch.cuda.get_device_name()}; torch {torch.__version__}; varlen_attn{inspect.signature(varlen_attn)}")
    dev, dtype, heads, kv_heads, dim = torch.device("cuda"), torch.bfloat16, 9, 3, 64
    docs = lengths(args.rows, args.context)
    B, T = args.rows, args.context
    torch.manual_seed(0)
    q = torch.randn(B, heads, T, dim, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(B, kv_heads, T, dim, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(B, kv_heads, T, dim, device=dev, dtype=dtype, requires_grad=True)
    doc_ids = torch.tensor([[i for i, n in enumerate(row) for _ in range(n)] for row in docs], device=dev)
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    mask = ((doc_ids[:, :, None] == doc_ids[:, None, :]) & causal)[:, None]
    flat = [n for row in docs for n in row]
    cu = torch.tensor([0, *torch.tensor(flat).cumsum(0).tolist()], device=dev, dtype=torch.int32)
    longest = max(flat)

    def masked():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        out.sum().backward()
        return out

    def whole():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.sum().backward()
        return out

    def varlen():
        qq, kk, vv = (t.transpose(1, 2).reshape(B * T, t.shape[1], dim) for t in (q, k, v))
        kw = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            kk, vv = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (kk, vv))
        out = varlen_attn(qq, kk, vv, cu, cu, longest, longest, **kw)
        out.sum().backward()
        return out.reshape(B, T, heads, dim).transpose(1, 2)

    reference, got = masked().detach(), varlen().detach()
    diff = ((got.float() - reference.float()).abs().max() / reference.float().abs().max()).item()
    times = {"masked SDPA (attnkit today)": timed(masked), "varlen_attn": timed(varlen),
             "causal SDPA, whole rows (not packing: bound)": timed(whole)}  # fmt: skip
    print(f"packed batch: {B} rows x {T}, {len(flat)} documents, longest {longest}; forward + backward, bf16")
    print(f"varlen vs masked SDPA: max |diff| / max |out| = {diff:.2e} ({'ok' if diff < 2e-2 else 'MISMATCH'})")
    for name, ms in times.items():
        print(f"| {name} | {ms:.3f} ms | {times['masked SDPA (attnkit today)'] / ms:.2f}x of masked |")
    return 0 if diff < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
