"""The task registry: ``@register_task`` on a :class:`~attnkit.training.task.Task` subclass makes it
available by its ``name`` to the command line, the API and the tuner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from attnkit.config import expand_dotted, load_yaml, merge
from attnkit.registry import Registry
from attnkit.training.task import Task, TaskConfig

__all__ = ["TASKS", "build_config", "get_task", "register_task"]

TASKS: Registry[Task[Any]] = Registry("task")
"""Every registered task (one instance each), by name."""

T = TypeVar("T", bound=type[Task[Any]])


def register_task(cls: T) -> T:
    """Class decorator: register one instance of the task ``cls`` under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} needs a class attribute `name` (a non-empty string) to be registered")
    if name in TASKS:
        raise ValueError(f"task name {name!r} is taken by {type(TASKS[name]).__qualname__}; choose another name")
    TASKS.add(name, cls())
    return cls


def get_task(name: str) -> Task[Any]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def build_config(
    task: str, config: str | Path | dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> TaskConfig:
    """The task's defaults, updated by a YAML file (or dict) and then by overrides (sections or dotted
    keys, see :func:`attnkit.config.expand_dotted`); validated.

    Overriding one key of a section (``trainer.threads=1``) keeps the task's other defaults of that
    section: the task's config merges given sections over its defaults (:class:`TaskConfig`).
    """
    spec = get_task(task)
    data: dict[str, Any] = {}
    source = f"{task} config"
    if isinstance(config, dict):
        data = config
    elif config is not None:
        data = load_yaml(config)
        source = f"config {config}"
    if overrides:
        data = merge(data, expand_dotted(overrides))
    return spec.config(data, source=source)
