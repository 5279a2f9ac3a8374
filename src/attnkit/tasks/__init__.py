"""The ready-made experiments, by name, and loading their runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.tasks.anomaly import AnomalyTask
from attnkit.tasks.base import ModelSpec, Task, TaskConfig
from attnkit.tasks.classify import ClassifyTask
from attnkit.tasks.lm import LanguageModelTask
from attnkit.tasks.reverse import ReverseTask
from attnkit.tasks.translate import TranslateTask
from attnkit.training import runner
from attnkit.training.runner import LoadedRun

TASKS: dict[str, Task] = {
    task.name: task for task in (ReverseTask(), AnomalyTask(), ClassifyTask(), LanguageModelTask(), TranslateTask())
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def load_run(path: str | Path) -> LoadedRun:
    """Rebuild a trained run of any ready-made task from its run folder or checkpoint file alone."""
    return runner.load_run(path, TASKS)


def evaluate(path: str | Path, trainer: dict[str, Any] | None = None) -> dict[str, float]:
    """Test a trained run (folder or checkpoint file) on its task's test split; returns the test metrics.
    ``trainer`` overrides the run's trainer section (see :func:`attnkit.training.runner.evaluate`)."""
    return runner.evaluate(load_run(path), trainer)


__all__ = ["TASKS", "LoadedRun", "ModelSpec", "Task", "TaskConfig", "evaluate", "get_task", "load_run"]
