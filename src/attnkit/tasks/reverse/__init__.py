"""The reverse task: predict a random sequence of symbols in reverse order (its LightningModule:
:mod:`attnkit.tasks.reverse.module`)."""

from attnkit.tasks.reverse.task import ReverseConfig, ReverseTask

__all__ = ["ReverseConfig", "ReverseTask"]
