"""Training curves from a run's ``logs/csv/metrics.csv``: loss and metrics, train and validation."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from attnkit.viz.figure import Figure

__all__ = ["metrics_csv", "plot_training_curves", "read_metrics"]

Series = dict[str, tuple[np.ndarray, np.ndarray]]


def metrics_csv(run: str | Path) -> Path:
    """The ``metrics.csv`` of a run folder (or the file itself)."""
    path = Path(run)
    if path.is_file():
        return path
    csv_path = path / "logs" / "csv" / "metrics.csv"
    if not path.exists():
        raise FileNotFoundError(f"no run folder at {path}")
    if not csv_path.is_file():
        raise FileNotFoundError(f"{path} has no logs/csv/metrics.csv: is it a run folder (runs/<task>/<run-id>)?")
    return csv_path


def read_metrics(run: str | Path, *, final_eval: bool = False) -> Series:
    """Every logged column as ``(steps, values)``, empty cells left out.

    Rows written after training (the best checkpoint's validation and test, whose ``epoch`` is past
    the last training epoch) are left out unless ``final_eval``.
    """
    path = metrics_csv(run)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} holds no logged values yet")
    if "step" not in rows[0]:
        raise ValueError(f"{path}: expected a 'step' column (Lightning's CSVLogger), found {sorted(rows[0])}")

    def number(text: str | None) -> float | None:
        if text is None or text == "":
            return None
        try:
            return float(text)
        except ValueError:
            return None

    train_epochs = [
        number(r.get("epoch")) for r in rows if any(k.startswith("train/") and r[k] for k in r if k)
    ]  # fmt: skip
    last_epoch = max((e for e in train_epochs if e is not None), default=math.inf)
    series: dict[str, tuple[list[float], list[float]]] = {}
    for row in rows:
        step, epoch = number(row.get("step")), number(row.get("epoch"))
        if step is None:
            continue
        if not final_eval and epoch is not None and epoch > last_epoch:
            continue
        for key, text in row.items():
            value = number(text)
            if key in (None, "step", "epoch") or value is None:
                continue
            steps, values = series.setdefault(key, ([], []))
            steps.append(step)
            values.append(value)
    return {k: (np.asarray(s), np.asarray(v)) for k, (s, v) in series.items()}


def _metric_name(column: str) -> tuple[str, str, str] | None:
    """``"train/loss_step"`` -> ``("loss", "train", "step")``; None for columns that are no metric."""
    if "/" not in column:
        return None
    split, name = column.split("/", 1)
    if split not in ("train", "val"):
        return None
    for suffix in ("_step", "_epoch"):
        if name.endswith(suffix):
            return name[: -len(suffix)], split, suffix[1:]
    return name, split, "epoch" if split == "val" else "step"


def plot_training_curves(run: str | Path) -> Figure:
    """One panel per metric (loss, acc, ...): training per step (faint) and per epoch, validation
    per epoch, over the optimiser step. ``run``: a run folder or its ``metrics.csv``."""
    series = read_metrics(run)
    panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for column, data in series.items():
        parsed = _metric_name(column)
        if parsed is not None:
            name, split, every = parsed
            panels.setdefault(name, {})[f"{split} ({'per ' + every})"] = data
    if not panels:
        raise ValueError(f"{metrics_csv(run)} has no train/ or val/ metrics to plot")
    order = sorted(panels, key=lambda n: (n != "loss", n != "acc", n))
    width = 4.2 * len(order)
    fig = Figure(figsize=(width, 3.2))  # a fixed layout: much faster to draw than a constrained one
    axes = fig.subplots(1, len(order), squeeze=False)[0]
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.15 / width, bottom=0.16, top=0.9, wspace=0.8 * len(order) / width)
    styles = {
        "train (per step)": {"color": "tab:blue", "alpha": 0.35, "linewidth": 1},
        "train (per epoch)": {"color": "tab:blue", "marker": "o", "markersize": 3},
        "val (per epoch)": {"color": "tab:orange", "marker": "s", "markersize": 3},
        "val (per step)": {"color": "tab:orange", "alpha": 0.6},
    }
    for ax, name in zip(axes, order):
        for label in sorted(panels[name], key=lambda s: (not s.startswith("train"), s)):
            steps, values = panels[name][label]
            ax.plot(steps, values, label=label, **styles.get(label, {}))
        ax.set_label(name)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig
