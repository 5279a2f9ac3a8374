"""The translate task's data: ``config`` (no Lightning), the pairs ``dataset`` and the data ``module``."""

from attnkit.data.translate.config import PairsDataConfig

__all__ = ["PairsDataConfig"]
