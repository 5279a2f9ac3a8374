"""The anomaly task's data: ``config`` (no Lightning), item ``features``, ``sets`` and the data ``module``."""

from attnkit.data.anomaly.config import AnomalyDataConfig

__all__ = ["AnomalyDataConfig"]
