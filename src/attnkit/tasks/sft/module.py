"""The sft task's LightningModule: next-token loss and accuracy over the assistant's tokens only."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnkit.nn import IGNORE_INDEX
from attnkit.training.module import ClassifierModule

__all__ = ["SFTModule", "assistant_loss", "token_losses"]


def token_losses(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
    """``(losses [B, T], counted [B, T])`` of a batch ``(inputs, targets, document_ids)``: each position's
    cross-entropy (0 where the target is ``IGNORE_INDEX``) and whether it counts. A packed batch gives every
    conversation the losses it has alone (block-diagonal attention, positions restarting)."""
    inputs, targets, documents = batch
    logits = model(inputs, document_ids=documents)
    losses = F.cross_entropy(logits.float().transpose(1, 2), targets, ignore_index=IGNORE_INDEX, reduction="none")
    return losses, targets != IGNORE_INDEX


def assistant_loss(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss, predictions [N], targets [N])`` of a batch ``(inputs, targets, document_ids)``: the mean
    cross-entropy over the ``N`` counted targets and the model's most likely token at each. The head runs
    on those positions only, chunk by chunk, without their ``[N, V]`` logits
    (:meth:`attnkit.models.LanguageModel.forward` with ``targets``)."""
    inputs, targets, documents = batch
    loss, predictions = model(inputs, document_ids=documents, targets=targets)
    return loss, predictions, targets[targets != IGNORE_INDEX]


class SFTModule(ClassifierModule):
    """Cross-entropy of the targets the data counts (the assistant's tokens, each turn's end-of-turn token
    included; every token with ``data.train_on_prompt``), averaged over those tokens of the batch; logs
    ``loss`` and ``acc`` (next-token accuracy on them) per split, the validation and test figures weighted
    by tokens (the split's mean per assistant token, over every process's batches together under DDP)."""

    def metrics(self) -> dict[str, Metric]:
        return {**super().metrics(), "loss": MeanMetric()}

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        return assistant_loss(self.model, batch)

    def _evaluate(self, batch: Any, stage: str, counted: bool = True) -> Tensor:
        loss, logits, target = self.step(batch)
        metrics = self.stage_metrics[stage]
        assert isinstance(metrics, nn.ModuleDict)
        for name, metric in metrics.items():
            assert isinstance(metric, Metric)
            if not counted:  # a padding batch: run, logged under the same names, never counted
                pass
            elif name == "loss":  # the batch's mean weighted by its tokens: summed over processes, then divided
                metric.update(loss.detach(), max(int(target.numel()), 1))
            else:
                metric.update(logits.detach(), target)
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=True)
        return loss
