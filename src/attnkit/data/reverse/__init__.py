"""The reverse task's data: ``config`` (no Lightning) and the data ``module``."""

from attnkit.data.reverse.config import ReverseDataConfig

__all__ = ["ReverseDataConfig"]
