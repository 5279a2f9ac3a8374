"""The classify task's LightningModule."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from attnkit.training.module import ClassifierModule

__all__ = ["ClassifyModule"]


class ClassifyModule(ClassifierModule):
    lora_train_modules = ("head",)  # the new head is trained in full with model.lora

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        ids, mask, labels = batch
        logits = self.model(ids, mask)
        return F.cross_entropy(logits, labels), logits, labels
