"""Benchmark: peak memory per process of DDP against FSDP (``trainer.strategy=fsdp``), 2 CPU processes,
with and without activation checkpointing, training a ~300M-parameter decoder (the lm task's model).

Run::

    .venv/bin/python benchmarks/memory.py                  # d_model 1024, 24 layers (302M parameters), 6 rounds
    .venv/bin/python benchmarks/memory.py --tiny           # a tiny model: a smoke test, not a measurement
    .venv/bin/python benchmarks/memory.py --json out.json

Goal (from the project's issue): **FSDP's peak <= 0.6 x DDP's peak per process** (the larger of the two
processes' peaks), with and without activation checkpointing (``--goal`` changes the ratio). The
script exits 1 when the median ratio over the rounds misses it.

Each measurement is one run in fresh processes: ``memory.py --worker CONFIG`` trains with Lightning's
Trainer on 2 CPU processes (gloo, 1 thread each; Lightning's launcher starts the second process with the
same command), the module and strategy being attnkit's own (``attnkit.training.runner.build_module`` for
the lm task, ``attnkit.training.sharding.strategy_for``, ``set_activation_checkpointing``): the
model built on each process as ``attnkit train`` builds it, sharded (FSDP: each block its own unit) or
replicated (DDP), Adam, ``--steps`` optimiser steps of ``--batch`` sequences of ``--seq-len`` tokens
per process, no validation, logging or checkpoint callbacks. Each process reads its own RSS high-water
mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``: the most resident memory it ever had, the
imports and the data included) when training ends, then once more after the run's full checkpoint was
written (``trainer.save_checkpoint``: FSDP gathers the full weights and Adam states into rank 0's memory
for it; reported apart, not in the goal), and the seconds ``trainer.fit`` took (the slower process).
Where the memory goes: each process also records its resident memory and high-water mark after the
imports and data, once the model is built, at the start of fit (sharded by then under FSDP) and
after every step (printed for rank 0 of the first round). ``--glibc-default`` leaves glibc's mmap
threshold dynamic in sharded runs (``attnkit.training.sharding.fix_mmap_threshold`` disabled), to
compare with what they held before attnkit fixed it.

Rounds: every round runs the four configurations (DDP, FSDP, DDP + checkpointing, FSDP + checkpointing),
in reversed order every other round; the ratio FSDP / DDP is taken within a round, and a round is a win
for FSDP when it is <= the goal. The machine's load average is printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIGS = {
    "ddp": ("ddp", False),
    "fsdp": ("fsdp", False),
    "ddp+ac": ("ddp", True),
    "fsdp+ac": ("fsdp", True),
}
FULL = {"d_model": 1024, "num_layers": 24, "num_heads": 16, "dim_feedforward": 4096}
TINY = {"d_model": 64, "num_layers": 2, "num_heads": 2, "dim_feedforward": 128}
MIB = 1024 * 1024


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # ru_maxrss: KiB on Linux


def _rss_mib() -> tuple[float, float]:
    """The resident memory now and its high-water mark so far (Linux's /proc: both read at once)."""
    try:
        with open("/proc/self/status") as status:
            kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in status) if k in ("VmRSS", "VmHWM")}
        return kib["VmRSS"] / 1024, kib["VmHWM"] / 1024
    except (OSError, KeyError):
        return _peak_mib(), _peak_mib()


def worker(args: argparse.Namespace) -> None:
    """One run (this process and the one Lightning starts): writes ``<out>/rank<r>.json``."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback

    import attnkit.training.module
    from attnkit.tasks import TASKS
    from attnkit.training.runner import build_module
    from attnkit.training.sharding import set_activation_checkpointing, sharding_plan, strategy_for

    torch.set_num_threads(1)
    if args.glibc_default:  # what a sharded run held before it fixed glibc's mmap threshold
        attnkit.training.module.fix_mmap_threshold = lambda *a, **k: False
    phases: list[tuple[str, float, float]] = []

    def mark(name: str) -> None:
        phases.append((name, *_rss_mib()))

    class Phases(Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            mark("fit start (sharded under fsdp)")

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
            mark(f"after step {trainer.global_step}")

    strategy, checkpointing = CONFIGS[args.worker]
    model = TINY if args.tiny else FULL
    task = TASKS["lm"]
    cfg = task.config(
        {
            "data": {"builtin_documents": 400},
            "model": {**model, "max_len": args.seq_len, "dropout": 0.0},
            "trainer": {
                "strategy": strategy,
                "devices": 2,
                "accelerator": "cpu",
                "batch_size": args.batch,
                "activation_checkpointing": checkpointing,
                "threads": 1,
            },
            "optim": {"warmup": 0},
        }
    )
    L.seed_everything(0, verbose=False)
    datamodule = task.build_datamodule(cfg)
    datamodule.setup("fit")
    mark("imports and data")
    module = build_module(task, cfg, datamodule)
    mark("model built")
    module.sharding = sharding_plan(cfg.trainer)
    set_activation_checkpointing(module.model, checkpointing)
    parameters = sum(p.numel() for p in module.model.parameters())
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy_for(cfg.trainer),
        max_epochs=1,
        limit_train_batches=args.steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        use_distributed_sampler=False,
        callbacks=[Phases()],
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    seconds = time.perf_counter() - start
    train_peak = _peak_mib()
    with tempfile.TemporaryDirectory() as folder:
        trainer.save_checkpoint(Path(folder) / "full.ckpt")
        trainer.strategy.barrier()
    record = {
        "config": args.worker,
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "parameters": parameters,
        "peak_mib": train_peak,
        "peak_with_checkpoint_mib": _peak_mib(),
        "train_s": seconds,
        "steps": trainer.global_step,
        "phases": phases,
    }
    Path(args.out, f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def _measure(config: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", config, "--out", out]
        cmd += ["--steps", str(args.steps), "--batch", str(args.batch), "--seq-len", str(args.seq_len)]
        cmd += ["--tiny"] if args.tiny else []
        cmd += ["--glibc-default"] if args.glibc_default else []
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"{config} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        records = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["world_size"], r["rank"]) for r in records] == [(2, 0), (2, 1)], records
    assert all(r["steps"] == args.steps for r in records), records
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps per run")
    parser.add_argument("--batch", type=int, default=1, help="sequences per process and step")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--goal", type=float, default=0.6, help="FSDP peak / DDP peak must be <= this")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="runs to measure")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--glibc-default",
        action="store_true",
        help="leave glibc's mmap threshold dynamic in sharded runs (as before attnkit fixed it): for comparison",
    )
    parser.add_argument("--worker", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    configs = [c for c in CONFIGS if c in args.configs]
    pairs = [(s, r) for s, r in (("fsdp", "ddp"), ("fsdp+ac", "ddp+ac")) if s in configs and r in configs]
    if not pairs:
        parser.error("--configs must include a pair to compare: fsdp and ddp, or fsdp+ac and ddp+ac")

    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    rounds: list[dict[str, list[dict[str, Any]]]] = []
    for i in range(args.rounds):
        order = configs if i % 2 == 0 else configs[::-1]
        rounds.append({config: _measure(config, args) for config in order})
        peaks = {c: max(r["peak_mib"] for r in rounds[-1][c]) for c in configs}
        print(f"round {i + 1}: " + ", ".join(f"{c} {peaks[c]:,.0f} MiB" for c in configs), flush=True)

    parameters = rounds[0][configs[0]][0]["parameters"]
    print(f"\nmodel: lm decoder, {parameters / 1e6:.1f}M parameters; 2 processes, {args.steps} steps of "
          f"{args.batch} x {args.seq_len} tokens per process; {args.rounds} rounds\n")  # fmt: skip
    print("| run | peak per process (MiB, median of rounds) | rank 0 | rank 1 | with checkpoint write, rank 0 | "
          "training s |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    summary: dict[str, dict[str, float]] = {}
    for config in configs:
        runs = [r[config] for r in rounds]
        row = {
            "peak_mib": statistics.median(max(p["peak_mib"] for p in run) for run in runs),
            "rank0_mib": statistics.median(run[0]["peak_mib"] for run in runs),
            "rank1_mib": statistics.median(run[1]["peak_mib"] for run in runs),
            "checkpoint_rank0_mib": statistics.median(run[0]["peak_with_checkpoint_mib"] for run in runs),
            "train_s": statistics.median(max(p["train_s"] for p in run) for run in runs),
        }
        summary[config] = row
        print(f"| {config} | {row['peak_mib']:,.0f} | {row['rank0_mib']:,.0f} | {row['rank1_mib']:,.0f} | "
              f"{row['checkpoint_rank0_mib']:,.0f} | {row['train_s']:.1f} |")  # fmt: skip

    checks = {}
    print()
    for sharded, replicated in pairs:
        ratios = [max(p["peak_mib"] for p in r[sharded]) / max(p["peak_mib"] for p in r[replicated]) for r in rounds]
        wins = sum(ratio <= args.goal for ratio in ratios)
        median = statistics.median(ratios)
        passed = median <= args.goal
        checks[f"{sharded}/{replicated}"] = {"ratios": ratios, "median": median, "wins": wins, "passed": passed}
        print(f"{sharded} / {replicated} peak per process: median {median:.3f} "
              f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)}); rounds within the goal: {wins} of "
              f"{len(ratios)}, above it: {len(ratios) - wins}")  # fmt: skip
    for sharded, replicated in (("ddp+ac", "ddp"), ("fsdp+ac", "fsdp")):
        if sharded not in summary or replicated not in summary:
            continue
        ratio = summary[sharded]["peak_mib"] / summary[replicated]["peak_mib"]
        print(f"{sharded} / {replicated}: {ratio:.3f} (activation checkpointing)")
    print("\nwhere the memory goes, rank 0 of round 1 (MiB: resident now / high-water mark so far):")
    for config in configs:
        points = rounds[0][config][0]["phases"]
        print(f"  {config}: " + "; ".join(f"{name} {rss:,.0f} / {peak:,.0f}" for name, rss, peak in points))
    load_end = os.getloadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    passed = all(c["passed"] for c in checks.values())
    print(f"goal: FSDP <= {args.goal} x DDP peak per process (median over rounds): {'PASS' if passed else 'FAIL'}")
    if args.json:
        meta = {"tiny": args.tiny, "rounds": args.rounds, "steps": args.steps, "batch": args.batch}
        meta |= {"glibc_default": args.glibc_default}
        meta |= {"seq_len": args.seq_len, "parameters": parameters, "load_start": load_start, "load_end": load_end}
        result = {"meta": meta, "summary": summary, "checks": checks, "passed": passed, "rounds": rounds}
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
