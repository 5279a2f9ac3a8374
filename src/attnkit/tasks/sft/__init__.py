"""Instruction tuning: fine-tune a pretrained decoder on conversations, with its chat template (its
LightningModule: :mod:`attnkit.tasks.sft.module`)."""

from attnkit.tasks.sft.task import SFTConfig, SFTModelConfig, SFTTask, base_chat, chat_reply

__all__ = ["SFTConfig", "SFTModelConfig", "SFTTask", "base_chat", "chat_reply"]
