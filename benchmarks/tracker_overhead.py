"""Benchmark: what a tracker costs ``attnkit train reverse`` (``trainer.loggers``), in paired rounds.

Run::

    .venv/bin/python benchmarks/tracker_overhead.py                    # MLflow (a local folder), 6 rounds
    .venv/bin/python benchmarks/tracker_overhead.py --tracker wandb    # W&B, offline
    .venv/bin/python benchmarks/tracker_overhead.py --mlflow-uri http://127.0.0.1:5000   # a tracking server
    .venv/bin/python benchmarks/tracker_overhead.py --rounds 10 --json out.json
    .venv/bin/python benchmarks/tracker_overhead.py --quick            # tiny data, 2 rounds: a smoke test

The goal (issue 38): a tracker costs at most 3 % of training throughput, i.e. the median over rounds of
``time with the tracker / time without`` is at most 1.03.

Each round trains the reverse task twice with the same config and seed, through the real code path
(``attnkit.training.runner.fit`` with ``attnkit.api.build_config("reverse", ...)``): once with the default
loggers (TensorBoard + CSV) and once with the tracker added (``trainer.loggers=[tensorboard, csv, TRACKER]``),
in alternating order (ABBA: round 0 without first, round 1 with first, ...), so slow drifts of the machine's load
cancel. The time measured is the training epochs' time (a callback: from ``on_train_epoch_start`` to
``on_train_epoch_end``, less the validation loop inside the epoch), where the tracker's per-step logging
(every ``trainer.log_every_n_steps``, 50 by default), the validation metrics and the learning rate go; the
whole ``fit`` (the tracker's start: import, experiment, parameters; its end: ``config.yaml`` and
``metrics.json`` as artifacts, the W&B run finished) is printed beside it, not in the goal, and so is the ratio
of the process's CPU time over the same epochs (steadier on a busy machine; W&B's own process is not in
it), and the time spent inside the tracker logger's ``log_metrics`` (all of the run's calls) as a share of the
training time: what the tracker adds, measured directly, whatever the load. A warm-up round (one run of
each, not counted) imports the tracker and creates its database first.

Before starting, the script checks that the machine is quiet (1-minute load average and the spread of a short
calibration loop, ``encoder_block.calibrate``) and prints a ``WARNING`` if it is not; the load is printed again
at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

try:
    import attnkit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lightning.pytorch.callbacks import Callback

from attnkit.api import build_config
from attnkit.tasks import get_task
from attnkit.training.runner import fit
from encoder_block import calibrate, loadavg

GOAL = 1.03


class EpochTimer(Callback):
    """Seconds spent in the training epochs, less the validation loops run inside them: wall-clock time and
    this process's CPU time (all its threads; less disturbed by other processes on a busy machine)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self._start = (0.0, 0.0)
        self._val = (0.0, 0.0)

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = self._now()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._val = self._now()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._start[0]:
            now = self._now()
            self._start = (self._start[0] + now[0] - self._val[0], self._start[1] + now[1] - self._val[1])

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        now = self._now()
        self.seconds += now[0] - self._start[0]
        self.cpu_seconds += now[1] - self._start[1]
        self._start = (0.0, 0.0)


@contextlib.contextmanager
def time_calls(cls: type, method: str, sink: list[float]) -> Iterator[None]:
    """Add the seconds spent in ``cls.method`` (the tracker logger's own ``log_metrics``) to ``sink[0]``."""
    original = getattr(cls, method)

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            sink[0] += time.perf_counter() - start

    setattr(cls, method, timed)
    try:
        yield
    finally:
        setattr(cls, method, original)


def tracker_class(tracker: str) -> type:
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    return MLFlowLogger if tracker == "mlflow" else WandbLogger


def train_once(args: argparse.Namespace, out: Path, tracked: bool, name: str) -> dict[str, float]:
    loggers = ["tensorboard", "csv", args.tracker] if tracked else ["tensorboard", "csv"]
    overrides: dict[str, Any] = {
        "output_dir": str(out),
        "name": name,
        "data.train_size": args.train_size,
        "trainer.max_epochs": args.epochs,
        "trainer.threads": args.threads,
        "trainer.progress_bar": False,
        "trainer.report": False,
        "trainer.loggers": loggers,
    }
    if args.tracker == "mlflow":
        overrides["trainer.mlflow_uri"] = args.mlflow_uri or str(out / "mlflow")
    cfg = build_config("reverse", overrides=overrides)
    timer = EpochTimer()
    start = time.perf_counter()
    in_tracker = [0.0]
    with time_calls(tracker_class(args.tracker), "log_metrics", in_tracker):
        fit(get_task("reverse"), cfg, callbacks=[timer])
    return {"train_s": timer.seconds, "train_cpu_s": timer.cpu_seconds, "fit_s": time.perf_counter() - start,
            "log_metrics_s": in_tracker[0]}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tracker", choices=("mlflow", "wandb"), default="mlflow")
    p.add_argument("--mlflow-uri", help="tracking URI (default: a folder in a temporary directory)")
    p.add_argument("--rounds", type=int, default=6, help="paired rounds (each: one run without, one with)")
    p.add_argument("--train-size", type=int, default=20000, help="training sequences per epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="tiny data, 2 rounds, no goal check (a smoke test)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.train_size = 2, 640
    if args.rounds < 1 or args.train_size < 1 or args.epochs < 1:
        p.error("--rounds, --train-size and --epochs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start, spread = loadavg(), calibrate(args.threads)["max_over_min"]
    print(f"# tracker overhead: {args.tracker} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{args.threads} threads)")  # fmt: skip
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    if load_start[0] > 0.5 or spread > 1.5:
        print(f"WARNING: the machine is not quiet (1-minute load {load_start[0]:.2f}, calibration spread "
              f"{spread:.2f}x): timings are noisy, compare ratios")  # fmt: skip
    print(f"reverse: {args.train_size} sequences x {args.epochs} epoch(s) per run; {args.rounds} paired rounds")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnkit-tracker-bench-") as tmp:
        out = Path(tmp)
        for tracked in (False, True):  # warm-up: imports, the tracker's database, the data
            train_once(args, out, tracked, f"warmup-{int(tracked)}")
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            times = {tracked: train_once(args, out, tracked, f"r{i}-{int(tracked)}") for tracked in order}
            ratio = times[True]["train_s"] / times[False]["train_s"]
            cpu_ratio = times[True]["train_cpu_s"] / times[False]["train_cpu_s"]
            fit_ratio = times[True]["fit_s"] / times[False]["fit_s"]
            rows.append({"round": i, "without": times[False], "with": times[True], "ratio": ratio,
                         "cpu_ratio": cpu_ratio, "fit_ratio": fit_ratio})  # fmt: skip
            print(f"round {i}: training {times[False]['train_s']:.2f} s without, {times[True]['train_s']:.2f} s with "
                  f"({ratio:.3f}x; CPU {cpu_ratio:.3f}x); whole fit {times[False]['fit_s']:.2f} s / "
                  f"{times[True]['fit_s']:.2f} s ({fit_ratio:.3f}x)")  # fmt: skip
    ratio = statistics.median(r["ratio"] for r in rows)
    fit_ratio = statistics.median(r["fit_ratio"] for r in rows)
    cpu_ratio = statistics.median(r["cpu_ratio"] for r in rows)
    seqs = args.train_size * args.epochs
    without = seqs / statistics.median(r["without"]["train_s"] for r in rows)
    with_ = seqs / statistics.median(r["with"]["train_s"] for r in rows)
    print(f"throughput: {without:.0f} sequences/s without, {with_:.0f} with {args.tracker}")
    share = statistics.median(r["with"]["log_metrics_s"] / r["with"]["train_s"] for r in rows)
    print(f"time inside the tracker's log_metrics (the whole fit's calls) / training time: {100 * share:.2f} %")
    print(f"median ratio (training time with / without): {ratio:.3f}  (goal <= {GOAL}); CPU time: {cpu_ratio:.3f}; "
          f"whole fit: {fit_ratio:.3f}")  # fmt: skip
    load_end = loadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    ok = ratio <= GOAL
    if not args.quick:
        print("goal met" if ok else "goal NOT met")
    if args.json:
        args.json.write_text(json.dumps({
            "tracker": args.tracker, "rounds": rows, "median_ratio": ratio, "median_fit_ratio": fit_ratio,
            "median_cpu_ratio": cpu_ratio, "log_metrics_share": share,
            "goal": GOAL, "load_start": load_start, "load_end": load_end, "calibration_spread": spread,
            "threads": args.threads, "train_size": args.train_size, "epochs": args.epochs,
        }, indent=2))  # fmt: skip
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
