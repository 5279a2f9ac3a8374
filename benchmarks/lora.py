"""Benchmark: a LoRA training step against full fine-tuning of the same model.

Run::

    .venv/bin/python benchmarks/lora.py                  # GPT-style lm, 8 paired rounds of 10 steps, 1 thread
    .venv/bin/python benchmarks/lora.py --rounds 12 --steps 20
    .venv/bin/python benchmarks/lora.py --quick          # tiny model: a smoke test, not a measurement
    .venv/bin/python benchmarks/lora.py --json out.json

What is compared (the reference is B, measured side by side in the same process):

* **B: full fine-tuning.** A :class:`attnkit.models.LanguageModel` (``--d-model``, ``--layers``, ...;
  default 256 wide, 4 blocks, context 128, 96 tokens: the lm task's shape, larger) trained with
  AdamW on every parameter: next-token cross-entropy, ``clip_grad_norm_(1.0)``.
* **A: LoRA.** The same model (same initial weights, checked) wrapped by
  :func:`attnkit.models.apply_lora` (``--rank``, ``--targets``; default rank 8 on ``qkv`` and
  ``out``), AdamW on the adapters only, the same loss and clipping.

Both train on the same batches (random token ids, pre-generated: step ``i`` of each run gets batch
``i``). A *round* times ``--steps`` optimiser steps of each (forward, backward, clip, step), after
one untimed warm-up step; the order alternates between rounds (B then A, A then B, ...) so slow
drifts in machine load cancel. Per round the ratio is ``time_B / time_A`` (above 1: LoRA is
faster); the reported figure is the median over the rounds, with the number of rounds LoRA won.
The trainable-parameter share of A (adapters / all parameters; the tied embedding counted once) is
printed too.

Goal (checked, exit status 1 when missed): LoRA's step is faster than full fine-tuning's: median
ratio > 1 and LoRA wins at least ``rounds - 1`` rounds. ``--quick`` runs 2 rounds of a tiny model and
checks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import attnkit
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import attnkit

from attnkit.models import LanguageModel, LanguageModelConfig, LoraConfig, apply_lora
from attnkit.models.lora import trainable_share


def build(args: argparse.Namespace) -> LanguageModel:
    torch.manual_seed(args.seed)
    cfg = LanguageModelConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        num_heads=args.heads,
        num_layers=args.layers,
        dim_feedforward=4 * args.d_model,
        dropout=0.0,
        max_len=args.context,
    )
    return LanguageModel(cfg).train()


class Run:
    """One model and its optimiser; :meth:`step` trains on one batch."""

    def __init__(self, model: LanguageModel, lr: float) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.01)
        self.losses: list[float] = []

    def step(self, batch: torch.Tensor) -> None:
        logits = self.model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.losses.append(float(loss.detach()))

    def timed(self, batches: list[torch.Tensor]) -> float:
        start = time.perf_counter()
        for batch in batches:
            self.step(batch)
        return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=10, help="timed optimiser steps per run and round")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--targets", default="qkv,out", help="comma-separated LoRA targets (qkv, out, ffn)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny model, 2 rounds: a smoke test")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.steps, args.batch, args.context = 2, 2, 4, 16
        args.d_model, args.layers, args.vocab = 32, 2, 24
    if args.rounds < 1 or args.steps < 1:
        p.error("--rounds and --steps must be >= 1")
    torch.set_num_threads(args.threads)

    full_model, lora_model = build(args), build(args)
    same_init = all(
        torch.equal(a, b) for a, b in zip(full_model.state_dict().values(), lora_model.state_dict().values())
    )
    lora_cfg = LoraConfig(rank=args.rank, alpha=2 * args.rank, targets=args.targets.split(","))
    apply_lora(lora_model, lora_cfg)
    trainable, total = trainable_share(lora_model)
    full, lora = Run(full_model, args.lr), Run(lora_model, args.lr)

    gen = torch.Generator().manual_seed(args.seed + 1)
    n = 1 + args.rounds * args.steps
    batches = [torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=gen) for _ in range(n)]
    full.step(batches[0])  # warm-up (allocations, optimiser state), not timed
    lora.step(batches[0])

    load_start = os.getloadavg()[0]
    rows = []
    for r in range(args.rounds):
        chunk = batches[1 + r * args.steps : 1 + (r + 1) * args.steps]
        if r % 2 == 0:
            t_full, t_lora = full.timed(chunk), lora.timed(chunk)
        else:
            t_lora, t_full = lora.timed(chunk), full.timed(chunk)
        rows.append({"round": r + 1, "full_s": t_full, "lora_s": t_lora, "ratio": t_full / t_lora})
    load_end = os.getloadavg()[0]

    ratio = statistics.median(row["ratio"] for row in rows)
    wins = sum(row["ratio"] > 1.0 for row in rows)
    ms = 1000.0 / args.steps
    print(f"attnkit {attnkit.__version__}, torch {torch.__version__}, {platform.machine()}, {args.threads} thread(s)")
    print(
        f"model: LanguageModel d_model={args.d_model} layers={args.layers} heads={args.heads} "
        f"context={args.context} vocab={args.vocab}; batch {args.batch}; {args.rounds} rounds x {args.steps} steps"
    )
    print(f"LoRA: rank {args.rank}, alpha {2 * args.rank}, targets {lora_cfg.targets}")
    print(f"initial weights identical: {'yes' if same_init else 'NO'}")
    print(f"trainable parameters: LoRA {trainable:,} of {total:,} ({100 * trainable / total:.2f}%); full {total:,}")
    print()
    print("| round | full fine-tuning ms/step | LoRA ms/step | full/LoRA | faster |")
    print("|---|---|---|---|---|")
    for row in rows:
        faster = "LoRA" if row["ratio"] > 1.0 else "full"
        print(
            f"| {row['round']} | {row['full_s'] * ms:.1f} | {row['lora_s'] * ms:.1f} | {row['ratio']:.2f} | {faster} |"
        )
    print()
    print(
        f"median step time: full {statistics.median(r['full_s'] for r in rows) * ms:.1f} ms, "
        f"LoRA {statistics.median(r['lora_s'] for r in rows) * ms:.1f} ms"
    )
    print(f"step-time ratio full/LoRA (median of paired rounds): {ratio:.2f}x; LoRA won {wins} of {len(rows)} rounds")
    print(f"final training loss: full {full.losses[-1]:.3f}, LoRA {lora.losses[-1]:.3f}")
    print(f"load average at start {load_start:.2f}, at end {load_end:.2f}")
    passed = same_init and ratio > 1.0 and wins >= len(rows) - 1
    if args.quick:
        print("goal: not checked (--quick)")
    else:
        print(
            f"goal: LoRA step faster than full fine-tuning (ratio > 1, won >= {len(rows) - 1} rounds): "
            f"{'PASS' if passed else 'FAIL'}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "meta": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "trainable": trainable,
                    "total": total,
                    "share": trainable / total,
                    "rounds": rows,
                    "ratio": ratio,
                    "wins": wins,
                    "passed": passed,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if args.quick or passed else 1


if __name__ == "__main__":
    sys.exit(main())
