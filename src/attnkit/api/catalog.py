"""What attnkit offers by name: the ready-made tasks (without importing Lightning or the data modules)."""

from __future__ import annotations

__all__ = ["list_tasks"]


def list_tasks() -> dict[str, str]:
    """Every registered task's name and one-line summary, sorted by name."""
    from attnkit.tasks import TASKS

    return {name: task.summary for name, task in sorted(TASKS.items())}
