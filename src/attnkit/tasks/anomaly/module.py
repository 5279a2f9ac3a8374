"""The anomaly task's LightningModule."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from attnkit.training.module import ClassifierModule

__all__ = ["AnomalyModule"]


class AnomalyModule(ClassifierModule):
    """A score per set element; softmax over the set's positions picks the odd one out."""

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x).squeeze(-1)  # [B, N]

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        x, target = batch
        logits = self(x)
        return F.cross_entropy(logits, target), logits, target
