"""Benchmark: training throughput of ``attnkit train reverse`` (Lightning) against a plain PyTorch loop.

Run::

    .venv/bin/python benchmarks/training_overhead.py                 # 2 epochs of 50,000 sequences, 1 thread
    .venv/bin/python benchmarks/training_overhead.py --epochs 6      # more epochs: a steadier median
    .venv/bin/python benchmarks/training_overhead.py --full          # also time `attnkit train reverse` end to end
    .venv/bin/python benchmarks/training_overhead.py --quick         # tiny data: a smoke test, not a measurement
    .venv/bin/python benchmarks/training_overhead.py --json out.json

The goal (from the project's issue): with the reverse task's default config, the Lightning run
trains at no less than 85% of the throughput of a plain PyTorch loop over the same model and data
(``A >= 0.85 x B`` in sequences/s, i.e. at most 15% slower).

* **A: attnkit / Lightning.** The real ``attnkit train`` code path: ``attnkit.training.runner.fit(task, cfg)``
  with the config built by ``attnkit.api.build_config("reverse", overrides=...)`` (defaults, plus
  ``trainer.max_epochs``, ``trainer.threads``, ``output_dir`` in a temporary folder and ``data.train_size``
  when changed), so the same ``ReverseModule``, Trainer flags, callbacks (``ModelCheckpoint``,
  ``LearningRateMonitor``, ``StepCheckpoint`` every 200 steps), TensorBoard + CSV loggers, progress bar
  and checkpoint I/O. The only change: ``attnkit.training.runner._trainer`` is wrapped for the duration of
  the run so that the Trainer gets one more callback, :class:`EpochTimer`, which records the time from
  ``on_train_epoch_start`` to ``on_train_epoch_end`` minus the validation loop inside the epoch
  (``on_validation_start`` .. ``on_validation_end``). Start-up, the sanity check, validation and the final
  validate/test are therefore not in the epoch time; the per-step work of every callback and logger, and
  the checkpoints written during the epoch (``StepCheckpoint``, and ``ModelCheckpoint``'s best/last
  files, written when validation ends), are.
* **B: plain PyTorch.** The same model (``TransformerPredictor(PredictorConfig(...))`` from
  ``ReverseTask.model_spec``, initialised from the same seed, so its weights equal A's at the start:
  checked), the same data (``ReverseDataModule.train_dataloader()``: batch size 128, shuffled), Adam with
  the same ``CosineWarmupScheduler`` stepped per batch (the same ``max_iters``: epochs x batches),
  ``clip_grad_norm_(..., 5.0)``, one-hot inputs, cross-entropy, and the training accuracy as a running
  count of correct predictions (no torchmetrics, no logging, no progress bar, no checkpoints).

Interleaving: B's epochs run inside the same process, one before each of A's epochs (B0, A0, B1, A1,
...), from :class:`EpochTimer`'s ``on_train_epoch_start`` before A's clock starts; B keeps its own RNG
stream (``torch.random.fork_rng``), so A's data order is not disturbed. Both use
``torch.set_num_threads(--threads)`` (A through ``trainer.threads``). Throughput is sequences per
second of training time per epoch; the first epoch is a warm-up and is skipped when there are more
than one. The reported ratio ``A/B`` is the median over epochs of ``time_B / time_A`` of the same
pair (B_i ran just before A_i, so slow drifts in machine load cancel); the ratio of the median
throughputs is printed beside it.

Both runs' mean training loss per epoch is printed: with the same initial weights, data order and
schedule the two should agree closely, which shows that both do the same work.

Before starting, the script checks that the machine is quiet (1-minute load average from
``os.getloadavg()``) and prints a ``WARNING`` if not; the load average is printed again at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

try:
    import attnkit
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import attnkit

import lightning as L
from lightning.pytorch.callbacks import Callback

from attnkit.api import build_config
from attnkit.models import PredictorConfig, TransformerPredictor
from attnkit.tasks import get_task
from attnkit.tasks.base import Task, TaskConfig
from attnkit.training import runner as attnkit_runner
from attnkit.training.schedule import CosineWarmupScheduler

GOAL = 0.85  # A must reach at least this fraction of B's throughput (<= 15% slower)


# --------------------------------------------------------------------------------------------
# B: the plain PyTorch loop
# --------------------------------------------------------------------------------------------


@dataclass
class EpochResult:
    seconds: float  # training time of the epoch
    sequences: int
    steps: int
    loss: float  # mean training loss (weighted by batch size)
    acc: float  # training accuracy over every position
    val_seconds: float = 0.0  # A only: the validation loop inside the epoch (excluded from `seconds`)

    @property
    def seq_per_s(self) -> float:
        return self.sequences / self.seconds


class PlainLoop:
    """The reverse task's training, written as a plain PyTorch loop."""

    def __init__(self, task: Task, cfg: TaskConfig, epochs: int) -> None:
        torch.manual_seed(cfg.seed)  # as `L.seed_everything(cfg.seed)` in `fit`, before the module is built
        datamodule = task.build_datamodule(cfg)
        datamodule.setup("fit")
        model_config = task.model_spec(cfg, datamodule).config
        self.model = TransformerPredictor(PredictorConfig(**model_config))
        self.initial_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.rng_state = torch.get_rng_state()  # B's own RNG stream (the data order)
        self.loader = datamodule.train_dataloader()
        self.num_categories = int(model_config["input_dim"])
        o = cfg.optim
        optimizer_cls = torch.optim.AdamW if o.optimizer == "adamw" else torch.optim.Adam
        self.optimizer = optimizer_cls(self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay)
        max_iters = o.max_iters or epochs * len(self.loader)  # Lightning: estimated_stepping_batches
        self.scheduler = CosineWarmupScheduler(self.optimizer, warmup=o.warmup, max_iters=max(max_iters, 1))
        self.clip = o.gradient_clip_val

    def run_epoch(self) -> EpochResult:
        """One epoch on B's own RNG stream; the global RNG is left as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng_state)
            start = time.perf_counter()
            result = self._epoch()
            result.seconds = time.perf_counter() - start
            self.rng_state = torch.get_rng_state()
        return result

    def _epoch(self) -> EpochResult:
        model, optimizer, scheduler, n = self.model, self.optimizer, self.scheduler, self.num_categories
        model.train()
        loss_sum, correct, total, sequences, steps = 0.0, 0, 0, 0, 0
        for inputs, labels in self.loader:
            logits = model(F.one_hot(inputs, n).float())
            logits, target = logits.reshape(-1, n), labels.reshape(-1)
            loss = F.cross_entropy(logits, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip)
            optimizer.step()
            scheduler.step()
            with torch.no_grad():
                correct += int((logits.argmax(-1) == target).sum())
            total += target.numel()
            batch = inputs.shape[0]
            sequences += batch
            loss_sum += loss.item() * batch
            steps += 1
        return EpochResult(0.0, sequences, steps, loss_sum / max(sequences, 1), correct / max(total, 1))


# --------------------------------------------------------------------------------------------
# A: timing the real `attnkit train` run
# --------------------------------------------------------------------------------------------


class EpochTimer(Callback):
    """Times each training epoch of the Lightning run (validation excluded); with ``plain``, runs one
    epoch of the plain loop before each of them (interleaving)."""

    def __init__(self, plain: PlainLoop | None, dataset_size: int, batch_size: int) -> None:
        self.plain = plain
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.epochs: list[EpochResult] = []
        self.plain_epochs: list[EpochResult] = []
        self.same_initial_weights: bool | None = None
        self._t0: float | None = None
        self._v0: float | None = None
        self._val = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plain is not None:
            state = pl_module.model.state_dict()
            self.same_initial_weights = state.keys() == self.plain.initial_state.keys() and all(
                torch.equal(v, self.plain.initial_state[k]) for k, v in state.items()
            )

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record_epoch_metrics(trainer)
        if self.plain is not None:
            self.plain_epochs.append(self.plain.run_epoch())
        self._val = 0.0
        self._t0 = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._t0 is not None:  # not the sanity check, nor validate() after fit
            self._v0 = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._v0 is not None:
            self._val += time.perf_counter() - self._v0
            self._v0 = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert self._t0 is not None
        total = time.perf_counter() - self._t0
        self._t0 = None
        steps = int(trainer.num_training_batches)
        sequences = min(steps * self.batch_size, self.dataset_size)  # only the last batch may be short
        self.epochs.append(EpochResult(total - self._val, sequences, steps, float("nan"), float("nan"), self._val))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record_epoch_metrics(trainer)

    def _record_epoch_metrics(self, trainer: L.Trainer) -> None:
        """``train/*_epoch`` reach ``callback_metrics`` after ``on_train_epoch_end``: fill in the last epoch."""
        if self.epochs and self.epochs[-1].loss != self.epochs[-1].loss:  # NaN: not yet filled in
            m = trainer.callback_metrics
            if "train/loss_epoch" in m:
                self.epochs[-1].loss = float(m["train/loss_epoch"])
            if "train/acc_epoch" in m:
                self.epochs[-1].acc = float(m["train/acc_epoch"])


@contextlib.contextmanager
def extra_trainer_callbacks(*callbacks: Callback) -> Iterator[None]:
    """While active, every Trainer that ``attnkit.training.runner`` builds gets ``callbacks`` appended."""
    original = attnkit_runner._trainer

    def _trainer(cfg: TaskConfig, run_dir: Path, *, callbacks: list[Callback], logger: Any) -> L.Trainer:
        return original(cfg, run_dir, callbacks=[*callbacks, *extra], logger=logger)

    extra = list(callbacks)
    attnkit_runner._trainer = _trainer  # type: ignore[assignment]
    try:
        yield
    finally:
        attnkit_runner._trainer = original  # type: ignore[assignment]


def attnkit_cli() -> list[str]:
    exe = Path(sys.executable).parent / "attnkit"
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-m", "attnkit.cli"]


def full_cli_run(threads: int, train_size: int | None) -> dict[str, Any]:
    """``attnkit train reverse`` with its default epochs, as a subprocess: the wall time a user sees."""
    out_dir = tempfile.mkdtemp(prefix="attnkit-bench-full-")
    shown = ["attnkit", "train", "reverse", f"trainer.threads={threads}"]
    if train_size is not None:
        shown.append(f"data.train_size={train_size}")
    cmd = [*attnkit_cli(), *shown[1:], f"output_dir={out_dir}"]
    try:
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # the progress bar goes to stdout (a pipe)
        wall = time.perf_counter() - start
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}")
    match = re.search(r"finished in ([0-9.]+) s", proc.stdout)
    return {
        "command": " ".join(shown),
        "wall_s": wall,
        "reported_s": float(match.group(1)) if match else None,
        "stdout": proc.stdout,
    }


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:  # not available on this platform
        return (float("nan"),) * 3


@dataclass
class Summary:
    name: str
    epochs: list[EpochResult]
    timed: list[int] = field(default_factory=list)  # indices of the epochs that count

    @property
    def median_s(self) -> float:
        return statistics.median(self.epochs[i].seconds for i in self.timed)

    @property
    def median_seq_per_s(self) -> float:
        return statistics.median(self.epochs[i].seq_per_s for i in self.timed)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=None, help="epochs of each run (default 2; 2 with --quick)")
    p.add_argument("--train-size", type=int, default=None, help="training sequences (default 50000, the default)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both runs (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny data: a smoke test, not a measurement")
    p.add_argument("--full", action="store_true", help="also time `attnkit train reverse` (10 epochs) end to end")
    p.add_argument(
        "--no-interleave", action="store_true", help="run all plain epochs first, then Lightning (for comparison)"
    )
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    epochs = args.epochs or 2
    if epochs < 1:
        raise SystemExit("--epochs must be >= 1")
    ncpu = os.cpu_count() or 1
    load_start = loadavg()
    torch.set_num_threads(args.threads)

    overrides: dict[str, Any] = {"trainer.max_epochs": epochs, "trainer.threads": args.threads}
    if args.quick:
        overrides.update({"data.train_size": args.train_size or 1024, "data.val_size": 128, "data.test_size": 128})
    elif args.train_size is not None:
        overrides["data.train_size"] = args.train_size
    task = get_task("reverse")
    out_root = tempfile.mkdtemp(prefix="attnkit-bench-")
    overrides.update({"output_dir": out_root, "name": "bench"})
    cfg = build_config("reverse", overrides=overrides)
    train_size = cfg.data.train_size  # type: ignore[attr-defined]

    print("# attnkit training overhead: `attnkit train reverse` (Lightning) vs a plain PyTorch loop")
    print()
    print(
        f"torch {torch.__version__}, lightning {L.__version__}, attnkit {attnkit.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}, cpu_count={ncpu}, threads={args.threads}"
        + (", QUICK (smoke test)" if args.quick else "")
    )
    t = cfg.trainer
    print(
        f"config: reverse defaults, train_size={train_size}, batch_size={t.batch_size}, epochs={epochs}, "
        f"progress_bar={t.progress_bar}, log_every_n_steps={t.log_every_n_steps}, "
        f"checkpoint_every_n_steps={t.checkpoint_every_n_steps}, gradient_clip_val={cfg.optim.gradient_clip_val}; "
        f"stdout (progress bar) is a terminal: {sys.stdout.isatty()}"
    )
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    warnings: list[str] = []
    if load_start[0] > 0.5:
        warnings.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if args.threads > 1:
        warnings.append(
            f"{args.threads} threads on a {ncpu}-core machine: another process that takes a core stalls the "
            "OpenMP team at every barrier; trust --threads 1 on a shared machine"
        )
    for w in warnings:
        print(f"WARNING: {w}")
    print(flush=True)

    # --- B is built first (same seed as fit's seed_everything), then A runs with B's epochs interleaved
    plain = PlainLoop(task, cfg, epochs)
    plain_first: list[EpochResult] = []
    if args.no_interleave:
        plain_first = [plain.run_epoch() for _ in range(epochs)]
    timer = EpochTimer(None if args.no_interleave else plain, train_size, cfg.trainer.batch_size)
    gc.collect()
    try:
        with extra_trainer_callbacks(timer):
            result = attnkit_runner.fit(task, cfg)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    plain_epochs = plain_first or timer.plain_epochs
    if len(timer.epochs) != epochs or len(plain_epochs) != epochs:
        raise RuntimeError(f"expected {epochs} epochs, timed {len(timer.epochs)} (A) and {len(plain_epochs)} (B)")
    interleaved_s = sum(e.seconds for e in timer.plain_epochs)
    load_end = loadavg()

    timed = list(range(1, epochs)) if epochs > 1 else [0]
    a = Summary("A attnkit train (Lightning)", timer.epochs, timed)
    b = Summary("B plain PyTorch loop", plain_epochs, timed)
    paired = [b.epochs[i].seconds / a.epochs[i].seconds for i in timed]
    ratio = statistics.median(paired)
    ratio_of_medians = a.median_seq_per_s / b.median_seq_per_s
    passed = ratio >= GOAL

    # --- tables
    skipped = "epoch 1 skipped as warm-up" if epochs > 1 else "single epoch, no warm-up skipped"
    print(f"## Training throughput, {args.threads} thread(s), median over epochs {timed[0] + 1}..{epochs} ({skipped})")
    print()
    print("| run | sequences/s | s / epoch | steps / epoch | A/B |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {b.name} | {b.median_seq_per_s:,.0f} | {b.median_s:.2f} | {b.epochs[0].steps} | 1.00 |")
    print(f"| {a.name} | {a.median_seq_per_s:,.0f} | {a.median_s:.2f} | {a.epochs[0].steps} | {ratio:.2f} |")
    print()
    print("### Per epoch (B_i ran just before A_i)")
    print()
    print("| epoch | B seq/s | A seq/s | A/B | B s | A s | A validation s | B train loss | A train loss |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (ea, eb) in enumerate(zip(a.epochs, b.epochs)):
        mark = "" if i in timed else " (warm-up)"
        print(
            f"| {i + 1}{mark} | {eb.seq_per_s:,.0f} | {ea.seq_per_s:,.0f} | {eb.seconds / ea.seconds:.2f} "
            f"| {eb.seconds:.2f} | {ea.seconds:.2f} | {ea.val_seconds:.2f} | {eb.loss:.4f} | {ea.loss:.4f} |"
        )
    print()
    same = {True: "yes", False: "NO", None: "not checked (--no-interleave)"}[timer.same_initial_weights]
    print(f"initial weights of A and B identical: {same}")
    a_fit_s = result.wall_time_s - interleaved_s
    print(
        f"A's whole fit() (start-up, sanity check, {epochs} epochs with validation, final validate + test): "
        f"{a_fit_s:.1f} s, of which training epochs {sum(e.seconds for e in a.epochs):.1f} s"
        + (" (plain epochs run in between are subtracted)" if interleaved_s else "")
    )
    print()

    full: dict[str, Any] | None = None
    if args.full:
        print("running `attnkit train reverse` end to end (default 10 epochs) ...", file=sys.stderr, flush=True)
        full = full_cli_run(args.threads, train_size if args.quick or args.train_size else None)
        full_epochs = build_config("reverse").trainer.max_epochs
        plain_est = full_epochs * b.median_s
        print(f"## `attnkit train reverse` end to end ({full_epochs} epochs, {args.threads} thread(s))")
        print()
        print("| what | seconds |")
        print("|---|---:|")
        print(f"| wall time of `{full['command']}` (process start to exit) | {full['wall_s']:.1f} |")
        if full["reported_s"] is not None:
            print(f"| 'finished in' reported by attnkit (inside fit) | {full['reported_s']:.1f} |")
        print(f"| plain loop, {full_epochs} x median epoch time (training only, no start-up) | {plain_est:.1f} |")
        print()

    verdict = "PASS" if passed else "FAIL"
    print(
        f"goal: A >= {GOAL:.2f} x B (Lightning at most {(1 - GOAL) * 100:.0f}% slower): "
        f"measured A/B = {ratio:.2f} (paired median; ratio of medians {ratio_of_medians:.2f}) -> {verdict}"
    )
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in warnings:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses tiny data; its numbers say nothing about the goal.")

    if args.json is not None:
        data = {
            "meta": {
                "torch": torch.__version__,
                "lightning": L.__version__,
                "attnkit": attnkit.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpu_count": ncpu,
                "threads": args.threads,
                "quick": args.quick,
                "interleaved": not args.no_interleave,
                "epochs": epochs,
                "train_size": train_size,
                "batch_size": t.batch_size,
                "timed_epochs": [i + 1 for i in timed],
                "load_start": load_start,
                "load_end": load_end,
                "warnings": warnings,
                "same_initial_weights": timer.same_initial_weights,
                "stdout_isatty": sys.stdout.isatty(),
            },
            "lightning": {"median_seq_per_s": a.median_seq_per_s, "epochs": [asdict(e) for e in a.epochs]},
            "plain": {"median_seq_per_s": b.median_seq_per_s, "epochs": [asdict(e) for e in b.epochs]},
            "ratio": ratio,
            "ratio_of_medians": ratio_of_medians,
            "paired_ratios": paired,
            "goal": {"target": GOAL, "passed": passed},
            "fit_wall_s": a_fit_s,
            "full": None if full is None else {k: v for k, v in full.items() if k != "stdout"},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2))
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
