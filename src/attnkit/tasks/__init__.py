"""The ready-made experiments, by name."""

from __future__ import annotations

from attnkit.tasks.anomaly import AnomalyTask
from attnkit.tasks.base import Task, TaskConfig
from attnkit.tasks.classify import ClassifyTask
from attnkit.tasks.lm import LanguageModelTask
from attnkit.tasks.reverse import ReverseTask
from attnkit.tasks.translate import TranslateTask

TASKS: dict[str, Task] = {
    task.name: task for task in (ReverseTask(), AnomalyTask(), ClassifyTask(), LanguageModelTask(), TranslateTask())
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


__all__ = ["TASKS", "Task", "TaskConfig", "get_task"]
