"""Benchmark: TPE and a Gaussian-process (Kriging) sampler against random search on the reverse task.

Run::

    .venv/bin/python benchmarks/tuning.py                    # 3 seeds x 16 trials per sampler (random, TPE, GP)
    .venv/bin/python benchmarks/tuning.py --seeds 0 1 2 3 4 --trials 24
    .venv/bin/python benchmarks/tuning.py --quick            # tiny data, 1 seed, 3 trials: a smoke test
    .venv/bin/python benchmarks/tuning.py --json out.json

Each (sampler, seed) pair is one study of ``attnkit.tune("reverse", space=examples/reverse_space.yaml,
...)`` -- the real tuning code path, in this process, one torch thread -- with ``--trials`` trials
(rejected samples, where ``num_heads`` does not divide ``d_model``, are not trained and not counted),
no pruner (so that both samplers get exactly the same training budget per trial), and the sampler
seeded with the seed, one torch thread. TPE and GP (Optuna's ``GPSampler``, the Kriging surrogate of
``--sampler gp``) draw their first ``--startup`` trials at random from the same seeds as the random
sampler, so the studies of one seed start from the same trials (the number they share is printed;
rejected samples count toward TPE's start-up) and differ in what the model makes of them. The
training config is the reverse task's with a smaller budget per trial (``--train-size`` sequences
of length ``--seq-len``, ``--epochs`` epochs); its training seed is the same in every trial. The
figure compared is the best validation accuracy found (``val/acc`` of the best checkpoint of the
best trial) after half and all of the trials, per seed and as a mean; also the mean accuracy of the
trials after the start-up (how much of the budget each sampler spends on good configs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "examples" / "reverse_space.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=None, help="trials per study (default 16; 3 with --quick)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="sampler seeds (default 0 1 2; 0 with --quick)")
    p.add_argument("--startup", type=int, default=None, help="random start of TPE/GP (default 5; 2 --quick)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per trial (default 2; 1 with --quick)")
    p.add_argument("--train-size", type=int, default=None, help="training sequences (default 4000; 600 --quick)")
    p.add_argument("--seq-len", type=int, default=12, help="sequence length (default 12; the task's default is 16)")
    p.add_argument("--space", type=Path, default=SPACE, help=f"search space (default {SPACE.relative_to(ROOT)})")
    p.add_argument("--quick", action="store_true", help="tiny data and budget: a smoke test, not a measurement")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    args.trials = args.trials or (3 if args.quick else 16)
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.startup = args.startup if args.startup is not None else (2 if args.quick else 5)
    args.epochs = args.epochs or (1 if args.quick else 2)
    args.train_size = args.train_size or (600 if args.quick else 4000)
    return args


def run_study(sampler: str, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import attnkit
    from attnkit.tuning import counts_toward_budget

    overrides = {
        "data.train_size": args.train_size,
        "data.seq_len": args.seq_len,
        "data.val_size": 128 if args.quick else 500,
        "data.test_size": 128 if args.quick else 500,
        "trainer.max_epochs": args.epochs,
    }
    start = time.perf_counter()
    study = attnkit.tune(
        "reverse",
        args.space,
        n_trials=args.trials,
        sampler=sampler,
        pruner="none",
        seed=seed,
        startup_trials=args.startup,
        study_name=f"{sampler}-seed{seed}",
        output_dir=str(out),
        results=False,
        **overrides,
    )
    wall = time.perf_counter() - start
    trials = [t for t in study.trials if counts_toward_budget(t)]
    values = [t.value if t.value is not None else float("nan") for t in trials]
    best_so_far, best = [], float("-inf")
    for v in values:
        if v == v:  # not NaN (a failed trial)
            best = max(best, v)
        best_so_far.append(best)
    best_trial = max((t for t in trials if t.value is not None), key=lambda t: t.value, default=None)
    return {
        "sampler": sampler,
        "seed": seed,
        "best": best_trial.value if best_trial else None,
        "best_trial": best_trial.number if best_trial else None,
        "best_params": best_trial.params if best_trial else None,
        "values": values,
        "params": [t.params for t in trials],
        "best_so_far": best_so_far,
        "rejected": sum("rejected" in t.user_attrs for t in study.trials),
        "failed": sum(t.state.name == "FAIL" for t in trials),
        "wall_s": wall,
    }


def _pct(value: float | None) -> str:
    return f"{100 * value:.2f} %" if value is not None and value == value and value > float("-inf") else "-"


SAMPLERS = ("random", "tpe", "gp")
LABELS = {"random": "random", "tpe": "TPE", "gp": "GP"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load_start = os.getloadavg()
    print(f"TPE and GP (Kriging) against random search: reverse task, space {args.space}")
    print(
        f"{args.trials} trials per study, seeds {args.seeds}, TPE/GP startup {args.startup}, no pruner; "
        f"{args.train_size} training sequences of length {args.seq_len}, {args.epochs} epoch(s) per trial; "
        "1 torch thread; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    )
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    if args.quick:
        print("--quick: tiny data and budget, a smoke test; the figures below are not a measurement")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="attnkit-tune-bench-") as tmp:
        for seed in args.seeds:
            for sampler in SAMPLERS:
                r = run_study(sampler, seed, args, Path(tmp))
                results.append(r)
                print(
                    f"  seed {seed} {sampler:<6}: best val/acc {_pct(r['best'])} (trial {r['best_trial']}), "
                    f"{r['rejected']} rejected samples, {r['wall_s']:.0f} s",
                    flush=True,
                )
    by = {(r["sampler"], r["seed"]): r for r in results}
    marks = sorted({k for k in (args.trials // 2, args.trials) if k >= 1})

    def best_after(sampler: str, seed: int, k: int) -> float:
        return by[(sampler, seed)]["best_so_far"][k - 1]

    cols = [f"{LABELS[s]}: best after {k}" for k in marks for s in SAMPLERS]
    print("\n| seed | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for seed in args.seeds:
        cells = [_pct(best_after(s, seed, k)) for k in marks for s in SAMPLERS]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    curves: dict[str, list[float]] = {
        sampler: [statistics.mean(best_after(sampler, s, k) for s in args.seeds) for k in range(1, args.trials + 1)]
        for sampler in SAMPLERS
    }
    print("| mean | " + " | ".join(_pct(curves[s][k - 1]) for k in marks for s in SAMPLERS) + " |")
    times = {sampler: sum(by[(sampler, s)]["wall_s"] for s in args.seeds) for sampler in SAMPLERS}
    print("wall time of the studies (s, sum over seeds): " + ", ".join(f"{LABELS[s]} {times[s]:.0f}" for s in SAMPLERS))

    after = {
        sampler: statistics.mean(v for s in args.seeds for v in by[(sampler, s)]["values"][args.startup :] if v == v)
        if args.trials > args.startup
        else None
        for sampler in SAMPLERS
    }
    print(
        f"\nmean val/acc of the trials after the first {args.startup} (where TPE and GP model the results), over "
        "seeds: " + ", ".join(f"{LABELS[s]} {_pct(after[s])}" for s in SAMPLERS)
    )

    def shared_start(sampler: str, seed: int) -> int:
        n = 0
        for a, b in zip(by[("random", seed)]["params"], by[(sampler, seed)]["params"]):
            if a != b:
                break
            n += 1
        return n

    same_start = {s: [shared_start(s, seed) for seed in args.seeds] for s in ("tpe", "gp")}
    print(
        "\ntrials identical to random search's before the model takes over from its random start-up (per seed): "
        f"TPE {same_start['tpe']}, GP {same_start['gp']} (rejected samples count toward TPE's start-up)"
    )
    wins: dict[str, int] = {}
    for sampler in ("tpe", "gp"):
        wins[sampler] = sum((by[(sampler, s)]["best"] or 0) > (by[("random", s)]["best"] or 0) for s in args.seeds)
        ties = sum(by[(sampler, s)]["best"] == by[("random", s)]["best"] for s in args.seeds)
        print(
            f"{LABELS[sampler]} found a better config than random search for {wins[sampler]} of {len(args.seeds)} "
            f"seeds ({ties} ties)"
        )
    load_end = os.getloadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "meta": {
                "quick": args.quick,
                "trials": args.trials,
                "seeds": args.seeds,
                "startup": args.startup,
                "epochs": args.epochs,
                "train_size": args.train_size,
                "seq_len": args.seq_len,
                "space": str(args.space),
                "load_start": load_start,
                "load_end": load_end,
            },
            "studies": results,
            "mean_best_after_k": curves,
            "mean_after_startup": after,
            "same_startup_trials": same_start,
            "wins_over_random": wins,
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
