"""Reinforcement learning with verifiable rewards: ``train grpo`` (the LightningModule:
:mod:`attnkit.tasks.grpo.module`; the loss: :mod:`attnkit.tasks.grpo.losses`; the rewards:
:mod:`attnkit.tasks.grpo.rewards`; the prompts: :mod:`attnkit.tasks.grpo.data`)."""

from attnkit.tasks.grpo.task import GRPOConfig, GRPOSettings, GRPOTask

__all__ = ["GRPOConfig", "GRPOSettings", "GRPOTask"]
