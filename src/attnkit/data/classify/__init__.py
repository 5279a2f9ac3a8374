"""The classify task's data: ``config`` (no Lightning), ``splits``, the encoded ``dataset`` and the data ``module``."""

from attnkit.data.classify.config import ClassifyDataConfig

__all__ = ["ClassifyDataConfig"]
