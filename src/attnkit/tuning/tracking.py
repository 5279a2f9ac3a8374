"""A study in the trackers of ``trainer.loggers``: one MLflow run for the study, each trial's run nested
under it (the tag ``mlflow.parentRunId``, which MLflow's UI shows as a tree), and W&B runs grouped by study.

Optuna's ``MLflowCallback`` is not used: it logs a run per trial by itself, with the sampled keys and the
objective only, beside the trial's training run (Lightning's ``MLFlowLogger`` inside :func:`fit`), which
holds the whole config, every metric and the run's files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from attnkit.training.trackers import end_parent_run, start_parent_run

__all__ = ["PARENT_ATTR", "end_study_trackers", "study_trackers"]

PARENT_ATTR = "mlflow_parent_run"  # the study's user attribute holding its MLflow run id
STUDY_FILES = ("study_report.html", "best.yaml", "trials.csv", "summary.json")


def study_trackers(cfg: Any, task: str, name: str, study: optuna.Study) -> dict[str, Any] | None:
    """Start (or, for a resumed study, reopen) the study's MLflow run; the trainer keys each trial's run
    gets (:attr:`attnkit.tuning.loop.WorkerSpec.trial_trainer`), or ``None`` when no tracker needs any."""
    out: dict[str, Any] = {}
    stored = study.user_attrs.get(PARENT_ATTR)
    parent = start_parent_run(cfg, task, name, stored)
    if parent is not None:
        if parent != stored:
            study.set_user_attr(PARENT_ATTR, parent)
        out["mlflow_tags"] = {**cfg.trainer.mlflow_tags, "mlflow.parentRunId": parent, "attnkit.study": name}
    if "wandb" in cfg.trainer.loggers and cfg.trainer.wandb_group is None:
        out["wandb_group"] = name
    return out or None


def end_study_trackers(cfg: Any, study: optuna.Study, study_dir: Path, monitor: str) -> None:
    """The study's MLflow run gets the best value, the trial counts, the best trial's keys and the
    study's files (``study_report.html``, ``best.yaml``, ...), and ends."""
    parent = study.user_attrs.get(PARENT_ATTR)
    if parent is None or "mlflow" not in cfg.trainer.loggers:
        return
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    metrics: dict[str, float] = {
        "trials_complete": len(complete),
        "trials_pruned": sum(t.state == TrialState.PRUNED for t in trials),
        "trials_failed": sum(t.state == TrialState.FAIL for t in trials),
    }
    tags: dict[str, Any] = {"attnkit.monitor": monitor}
    if complete:
        best = study.best_trial
        metrics["best_value"] = float(best.value) if best.value is not None else float("nan")
        metrics["best_trial"] = best.number
        tags.update({f"best.{k}": v for k, v in best.params.items()})
    end_parent_run(cfg, parent, metrics=metrics, tags=tags, files=[study_dir / n for n in STUDY_FILES])
