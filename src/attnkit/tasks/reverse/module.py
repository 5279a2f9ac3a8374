"""The reverse task's LightningModule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.nn.functional as F
from torch import Tensor

from attnkit.training.module import ClassifierModule

if TYPE_CHECKING:
    from attnkit.models.encoders import TransformerPredictor

__all__ = ["ReverseModule"]


class ReverseModule(ClassifierModule):
    """One-hot symbols in, a class per position out; cross-entropy over all positions."""

    model: TransformerPredictor  # the task's model_spec: ModelSpec("predictor", ...)

    def forward(self, inputs: Tensor) -> Tensor:
        num_categories = self.model.config.input_dim
        assert num_categories is not None  # one-hot features in (the task's model_spec sets input_dim)
        return self.model(F.one_hot(inputs, num_categories).float())

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        inputs, labels = batch
        logits = self(inputs)
        logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
        return F.cross_entropy(logits, labels), logits, labels
