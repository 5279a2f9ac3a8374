"""What a task is: its config, its data, its model and how to predict with it."""

from __future__ import annotations

from typing import Any, ClassVar

import lightning as L
from pydantic import Field

from attnkit.models.config import StrictModel
from attnkit.training.config import OptimConfig, TrainerConfig
from attnkit.training.module import TaskModule

__all__ = ["Task", "TaskConfig"]


class TaskConfig(StrictModel):
    """Sections every task has; tasks add ``model`` and ``data``."""

    seed: int = Field(42, description="seeds Python, NumPy and torch (and data-loader workers)")
    output_dir: str = Field("runs", description="runs are written to <output_dir>/<task>/<run-id>/")
    name: str | None = Field(None, description="run id (default: a timestamp)")
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()


class Task:
    """A ready-made experiment. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    summary: ClassVar[str]
    config_cls: ClassVar[type[TaskConfig]]
    module_cls: ClassVar[type[TaskModule]]

    def build_datamodule(self, cfg: Any, artifacts: dict[str, Any] | None = None) -> L.LightningDataModule:
        """The task's data module; ``artifacts`` (from a checkpoint) restore e.g. its vocabulary."""
        raise NotImplementedError

    def model_spec(self, cfg: Any, datamodule: Any) -> tuple[str, dict[str, Any], int]:
        """``(model registry name, full model config, number of classes for the accuracy)``
        once the data module is set up."""
        raise NotImplementedError

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Turn user inputs (command-line strings) into printable predictions."""
        raise NotImplementedError
