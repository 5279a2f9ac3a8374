"""The run a picture or the explorer shows: one already loaded, or loaded from its folder or checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnkit.training.resolve import ResolvedModel
    from attnkit.training.task import LoadedRun

__all__ = ["loaded_run"]


def loaded_run(run: str | Path | ResolvedModel | LoadedRun) -> LoadedRun:
    """``run`` itself when it is a :class:`~attnkit.training.task.LoadedRun`, else the run loaded from its
    folder or checkpoint file (:func:`attnkit.tasks.load_run`)."""
    # Lazy, to keep a heavy stack off the start-up path (no cycle: neither imports attnkit.viz): a run's
    # task and config (pydantic, the task configs) and loading it (every task, Lightning) are imported when
    # a run is shown, not by `import attnkit.viz`, whose figures of arrays, curves and schedules need neither.
    if not isinstance(run, (str, os.PathLike)):
        from attnkit.training.task import LoadedRun

        if isinstance(run, LoadedRun):
            return run
    from attnkit.tasks import load_run

    return load_run(run)
