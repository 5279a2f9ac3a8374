"""Figures of runs and of the building blocks, written as image files, and the run report.

Each function draws its figure, writes it to ``out`` (a ``.png`` or ``.svg`` file; its folder is
created) and returns the path written. Matplotlib (and, for runs, the task) is imported on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_attention", "plot_curves", "plot_positional", "plot_schedule", "report", "save_figure"]


def save_figure(fig: Any, out: str | Path) -> Path:
    """Write the figure ``fig`` to ``out`` (``.png`` or ``.svg``, at 100 dpi), creating its folder; returns its path."""
    path = Path(out)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"--out {out}: write a .png or .svg file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def plot_attention(
    run: str | Path, out: str | Path = "attention.png", *, text: str | None = None, index: int | None = None
) -> Path:
    """The attention maps of a trained run (layers as rows, heads as columns) for the input ``text``
    (written as for ``attnkit predict``, e.g. ``"3 1 4 1 5"``) or validation example ``index``
    (default 0); see :func:`attnkit.viz.attention.plot_run_attention`."""
    from attnkit.viz.attention import plot_run_attention

    return save_figure(plot_run_attention(run, text=text, index=index), out)


def plot_positional(dim: int = 48, length: int = 96, out: str | Path = "positional.png", *, curves: int = 4) -> Path:
    """The sinusoidal positional encoding: a heat map over position x dimension, and its first
    ``curves`` dimensions; see :func:`attnkit.viz.positional.plot_positional_encoding`."""
    from attnkit.viz.positional import plot_positional_encoding

    return save_figure(plot_positional_encoding(dim, length, num_curves=curves), out)


def plot_schedule(
    run: str | Path | None = None,
    out: str | Path = "schedule.png",
    *,
    warmup: int = 50,
    max_iters: int | None = None,
    lr: float | None = None,
) -> Path:
    """The learning rate a ``run`` logged per step over its configured schedule, or without ``run`` the
    cosine schedule with ``warmup`` steps over ``max_iters`` (required then), times ``lr`` when given
    (else the factor); see :mod:`attnkit.viz.schedule`."""
    if run is not None:
        from attnkit.viz.schedule import plot_run_lr

        fig = plot_run_lr(run)
    else:
        if max_iters is None:
            raise ValueError("give a RUN folder, or --max-iters (and --warmup) for the formula")
        from attnkit.viz.schedule import plot_lr_schedule

        fig = plot_lr_schedule(warmup, max_iters, lr=lr)
    return save_figure(fig, out)


def plot_curves(run: str | Path, out: str | Path = "curves.png") -> Path:
    """The training curves of a run: loss and metrics, train and validation; see
    :func:`attnkit.viz.curves.plot_training_curves`."""
    from attnkit.viz.curves import plot_training_curves

    return save_figure(plot_training_curves(run), out)


def report(run: str | Path, *, num_examples: int = 3, out: str | Path | None = None) -> Path:
    """(Re)write a run's ``report.html`` (config, metrics, curves and the attention maps of
    ``num_examples`` validation examples, in one offline file) into the run folder or to ``out``;
    returns its path. See :func:`attnkit.viz.report.write_report`."""
    from attnkit.viz.report import write_report

    return write_report(run, num_examples=num_examples, out=out)
