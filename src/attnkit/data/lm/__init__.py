"""The lm task's data: ``config`` (no Lightning), packed ``blocks`` and the data ``module``."""

from attnkit.data.lm.config import LMDataConfig

__all__ = ["LMDataConfig"]
