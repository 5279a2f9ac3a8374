"""Runs: build a task's config, train, prepare its data, evaluate and predict with a trained run.

Imported by :mod:`attnkit.api` on first use (it imports Lightning through the training runner).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnkit.config import ConfigError, expand_dotted, load_yaml, merge
from attnkit.tasks import build_config, get_task, load_run
from attnkit.training.runner import TrainResult, fit
from attnkit.training.runner import evaluate as evaluate_run
from attnkit.training.trackers import log_run_files
from attnkit.viz.report import write_report

__all__ = [
    "build_config",
    "evaluate",
    "load_run",
    "predict",
    "predict_file",
    "prepare",
    "train",
    "write_report_or_warn",
]


def train(
    task: str,
    config: str | Path | dict[str, Any] | None = None,
    *,
    resume: str | Path | None = None,
    callbacks: list[Any] | None = None,
    **overrides: Any,
) -> TrainResult:
    """Train a task and return the trained model, its metrics and its run folder.

    Overrides are sections (``trainer={"max_epochs": 2}``) or dotted keys
    (``**{"optim.lr": 1e-3}``). With ``resume`` (a run folder) training continues from its last
    checkpoint with the run's own config (overrides still apply, e.g. more epochs). ``callbacks``
    are extra Lightning callbacks for the Trainer.
    """
    if resume is not None:
        saved = Path(resume) / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"cannot resume {resume}: it has no config.yaml (is it a run folder?)")
        config = merge(load_yaml(saved), config if isinstance(config, dict) else {})
    cfg = build_config(task, config, overrides)
    result = fit(get_task(task), cfg, resume=resume, callbacks=callbacks)
    if cfg.trainer.report and result.is_global_zero:
        write_report_or_warn(result.run_dir)
        log_run_files(result.run_dir, [result.run_dir / "report.html"])  # to the run's trackers (trainer.loggers)
    return result


def evaluate(
    run: str | Path,
    data: str | Path | None = None,
    *,
    standardized: bool = False,
    batch_size: int | None = None,
    trainer: dict[str, Any] | None = None,
) -> dict[str, float]:
    """The test metrics of a trained run (folder or checkpoint file): on its task's test split, or
    with ``data`` on that file, read in the task's format and prepared as the run's training data
    (vocabulary, label names, feature standardisation). ``standardized``: ``data``'s features are
    already standardised (tasks whose inputs are feature vectors: anomaly). ``batch_size``: default
    the run's ``trainer.batch_size``. ``trainer``: overrides of the run's trainer section
    (``{"devices": 1, "strategy": "auto"}`` tests a multi-process run in one process).
    """
    loaded = load_run(run)
    _check_standardized(loaded.task, standardized)
    if data is None:
        if standardized:
            raise ValueError("standardized=True describes a data file; it needs data=FILE")
        return evaluate_run(loaded, trainer=trainer)
    datamodule = loaded.task.build_eval_datamodule(
        loaded.config,
        loaded.hparams.get("artifacts") or {},
        data,
        batch_size=batch_size or loaded.config.trainer.batch_size,
        standardized=standardized,
    )
    return evaluate_run(loaded, datamodule, trainer)


def predict_file(
    run: str | Path, path: str | Path, *, batch_size: int = 64, standardized: bool = False
) -> Iterator[dict[str, Any]]:
    """One record (a JSON-able dict) per input of the file ``path`` with a trained run's prediction
    and its probability or score; what each task reads and writes is in the README ("Your own files")."""
    loaded = load_run(run)
    _check_standardized(loaded.task, standardized)
    return loaded.task.predict_file(loaded.module, path, batch_size=batch_size, standardized=standardized)


def predict(run: str | Path, inputs: Sequence[str], *, standardized: bool = False) -> list[str]:
    """A trained run's prediction for each of ``inputs`` (written as the task reads them, e.g. ``"3 1 4 1 5"``
    for reverse), one readable line each. ``standardized``: the inputs are already standardised feature
    vectors (tasks whose inputs are feature vectors: anomaly)."""
    loaded = load_run(run)
    if standardized and not loaded.task.feature_inputs:
        raise ValueError(
            f"--standardized is for runs whose inputs are feature vectors (anomaly), not {loaded.task.name!r}"
        )
    options = {"standardized": True} if standardized else {}
    return list(loaded.task.predict(loaded.module, list(inputs), **options))


def _check_standardized(task: Any, standardized: bool) -> None:
    if standardized and not task.feature_inputs:
        raise ValueError(
            f"--standardized / standardized=True is for runs whose inputs are feature vectors (anomaly); "
            f"this is a {task.name!r} run"
        )


def write_report_or_warn(run_dir: Path) -> None:
    """``report.html`` in the run folder. A failure only warns: the trained run is kept either way."""
    try:
        write_report(run_dir)
    except Exception as err:
        warnings.warn(
            f"could not write {run_dir / 'report.html'} ({type(err).__name__}: {err}); the run is complete. "
            f"Try again with: attnkit report {run_dir}",
            stacklevel=2,
        )


def prepare(task: str, config: str | Path | dict[str, Any] | None = None, **overrides: Any) -> Path | None:
    """Build the task's token cache ahead of training (e.g. on a login node), with the same config
    as ``train``; returns the cache entry's folder (``None`` for tasks without a token cache)."""
    cfg = build_config(task, config, expand_dotted(overrides))
    datamodule = get_task(task).build_datamodule(cfg)
    if hasattr(datamodule, "progress"):
        datamodule.progress = True
    datamodule.prepare_data()
    datamodule.setup("fit")
    cache = getattr(datamodule, "cache", None)
    return None if cache is None else Path(cache.folder)
