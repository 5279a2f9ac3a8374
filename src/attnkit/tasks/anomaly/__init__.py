"""Set anomaly detection: find the one item of a set that belongs to another class (its LightningModule:
:mod:`attnkit.tasks.anomaly.module`)."""

from attnkit.tasks.anomaly.task import AnomalyConfig, AnomalyTask

__all__ = ["AnomalyConfig", "AnomalyTask"]
