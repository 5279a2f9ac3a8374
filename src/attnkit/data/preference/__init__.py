"""Preference data for the dpo and kto tasks: pairs and unpaired feedback in TRL's columns
(:mod:`attnkit.data.preference.read`), encoded as TRL does (:mod:`attnkit.data.preference.encode`), in batches
(:mod:`attnkit.data.preference.module`)."""

from attnkit.data.preference.config import PreferenceDataConfig

__all__ = ["PreferenceDataConfig"]
