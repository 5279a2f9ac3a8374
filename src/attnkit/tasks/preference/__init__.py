"""Preference tuning: ``train dpo`` (DPO, IPO on preference pairs) and ``train kto`` (KTO on unpaired feedback)
(the LightningModules: :mod:`attnkit.tasks.preference.module`; the losses: :mod:`attnkit.tasks.preference.losses`)."""

from attnkit.tasks.preference.task import DPOConfig, DPOTask, KTOConfig, KTOTask

__all__ = ["DPOConfig", "DPOTask", "KTOConfig", "KTOTask"]
