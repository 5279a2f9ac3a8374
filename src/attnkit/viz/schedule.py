"""The learning-rate schedule: the warm-up + cosine factor over the iterations, and the learning rate
a run actually logged (``lr-<Optimizer>`` in ``logs/csv/metrics.csv``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnkit.training.schedule import cosine_warmup_factor
from attnkit.viz.curves import read_metrics
from attnkit.viz.figure import Figure

__all__ = ["plot_lr_schedule", "plot_run_lr"]


def plot_lr_schedule(warmup: int, max_iters: int, *, lr: float | None = None, steps: int | None = None) -> Figure:
    """:func:`~attnkit.training.schedule.cosine_warmup_factor` at every step ``0 .. steps`` (default
    ``max_iters``), times ``lr`` when given (then the y axis is the learning rate)."""
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1:
        raise ValueError(f"max_iters must be a positive integer, got {max_iters!r}")
    steps = max_iters if steps is None else steps
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    x = np.arange(steps + 1)
    y = np.array([cosine_warmup_factor(int(s), warmup, max_iters) for s in x]) * (lr or 1.0)
    fig = Figure(figsize=(6.0, 3.2))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.16, top=0.9)
    ax.plot(x, y, color="tab:blue", label="warm-up + cosine")
    if 0 < warmup < steps:
        ax.axvline(warmup, color="grey", linestyle=":", linewidth=1, label=f"end of warm-up ({warmup})")
    ax.set_label("schedule")
    ax.set_xlabel("iteration (optimiser step)")
    ax.set_ylabel("learning rate" if lr else "factor of the base learning rate")
    ax.set_title(f"Learning-rate schedule: warmup {warmup}, max_iters {max_iters}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _scheduler_state(run_dir: Path) -> dict[str, Any] | None:
    """``warmup``, ``max_iters`` and ``base_lrs`` of the run's scheduler, from its last checkpoint."""
    for name in ("last.ckpt", "best.ckpt"):
        path = run_dir / "checkpoints" / name
        if path.is_file():
            try:
                checkpoint = torch.load(path, map_location="cpu", weights_only=True)
                state = checkpoint["lr_schedulers"][0]
                return {k: state[k] for k in ("warmup", "max_iters", "base_lrs")}
            except (KeyError, IndexError, TypeError, RuntimeError, EOFError):
                continue
    return None


def plot_run_lr(run: str | Path) -> Figure:
    """The learning rate a run logged per step (dots) over the schedule it was configured with (line,
    from the scheduler state in its last checkpoint)."""
    run_dir = Path(run)
    series = read_metrics(run_dir)
    columns = sorted(k for k in series if k.startswith("lr-"))
    state = _scheduler_state(run_dir) if run_dir.is_dir() else None
    if not columns and state is None:
        raise ValueError(f"{run_dir} logged no learning rate (no lr-* column in logs/csv/metrics.csv)")
    fig = Figure(figsize=(6.0, 3.2))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.16, top=0.9)
    if state is not None:
        last = max((int(series[c][0].max()) for c in columns), default=0)
        x = np.arange(max(last, state["max_iters"]) + 1)
        y = [state["base_lrs"][0] * cosine_warmup_factor(int(s), state["warmup"], state["max_iters"]) for s in x]
        ax.plot(
            x,
            y,
            color="grey",
            linewidth=1,
            label=f"schedule (warmup {state['warmup']}, max_iters {state['max_iters']})",
        )
    for i, column in enumerate(columns):
        steps, values = series[column]
        ax.plot(steps, values, linestyle="none", marker="o", markersize=3, color=f"C{i}", label=f"logged {column}")
    ax.set_label("learning rate")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    if columns:
        ax.set_title("Learning rate", fontsize=10)
    else:
        ax.set_title("Learning rate: none logged (fewer steps than trainer.log_every_n_steps)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
