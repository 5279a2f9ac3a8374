"""The run a picture or the explorer shows: one already loaded, or loaded from its folder or checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnkit.training.task import LoadedRun

if TYPE_CHECKING:
    from attnkit.training.resolve import ResolvedModel

__all__ = ["loaded_run"]


def loaded_run(run: str | Path | ResolvedModel | LoadedRun) -> LoadedRun:
    """``run`` itself when it is a :class:`~attnkit.training.task.LoadedRun`, else the run loaded from its
    folder or checkpoint file (:func:`attnkit.tasks.load_run`)."""
    if isinstance(run, LoadedRun):
        return run
    # Loading a run needs every task (the registry) and Lightning: imported when a run is loaded, not by
    # `import attnkit.viz`, whose figures of arrays, curves and schedules need neither.
    from attnkit.tasks import load_run

    return load_run(run)
