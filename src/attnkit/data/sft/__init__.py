"""Instruction-tuning data: conversations rendered with the model's chat template, assistant tokens as the
targets (:mod:`attnkit.data.sft.encode`), length-bucketed or packed batches (:mod:`attnkit.data.sft.module`)."""

from attnkit.data.sft.config import SFTDataConfig

__all__ = ["SFTDataConfig"]
