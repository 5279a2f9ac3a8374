"""The ready-made experiments, by name, and loading their runs.

Each task registers itself with :func:`register_task` when its module is imported; this package imports
every built-in one. Describing tasks (their names, summaries and config classes) imports neither
Lightning nor the data modules: a task imports those when it trains, evaluates or predicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.tasks.registry import TASKS, build_config, get_task, register_task
from attnkit.training.task import LoadedRun, ModelSpec, Task, TaskConfig

# The built-in tasks (each registers itself on import).
from attnkit.tasks import anomaly, classify, lm, reverse, translate  # noqa: F401  isort: skip


def load_run(path: str | Path) -> LoadedRun:
    """Rebuild a trained run of any registered task from its run folder or checkpoint file alone."""
    from attnkit.training import runner  # Lightning: only when a run is loaded

    return runner.load_run(path, dict(TASKS.items()))


def evaluate(path: str | Path, trainer: dict[str, Any] | None = None) -> dict[str, float]:
    """Test a trained run (folder or checkpoint file) on its task's test split; returns the test metrics.
    ``trainer`` overrides the run's trainer section (see :func:`attnkit.training.runner.evaluate`)."""
    from attnkit.training import runner  # Lightning: only when a run is evaluated

    return runner.evaluate(load_run(path), trainer=trainer)


__all__ = [
    "TASKS",
    "LoadedRun",
    "ModelSpec",
    "Task",
    "TaskConfig",
    "build_config",
    "evaluate",
    "get_task",
    "load_run",
    "register_task",
]
