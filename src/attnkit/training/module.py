"""The LightningModule every task builds on: optimiser, schedule, metrics and logging."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from attnkit.models import build_model
from attnkit.training.config import OptimConfig
from attnkit.training.schedule import CosineWarmupScheduler

__all__ = ["TaskModule"]


class TaskModule(L.LightningModule):
    """Wraps an attnkit model for training; subclasses define :meth:`step` for their task.

    Everything needed to rebuild the module is in its hyper-parameters (saved in every
    checkpoint): the task name, the resolved task config, the model's registry name and full
    config, and the data artifacts (e.g. a vocabulary).
    """

    def __init__(
        self,
        task: str,
        config: dict[str, Any],
        model: dict[str, Any],
        artifacts: dict[str, Any],
        num_classes: int,
        attnkit_version: str,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(model["name"], model["config"])
        self.optim_config = OptimConfig.model_validate(config["optim"])
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        """``batch`` -> ``(loss, logits [N, C], target [N])`` with padding already removed."""
        raise NotImplementedError

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.model(*args, **kwargs)

    def _shared(self, batch: Any, stage: str, metric: MulticlassAccuracy) -> Tensor:
        loss, logits, target = self.step(batch)
        metric(logits.detach(), target)
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, sync_dist=stage != "train")
        self.log(f"{stage}/acc", metric, on_step=on_step, on_epoch=True, prog_bar=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared(batch, "train", self.train_acc)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "val", self.val_acc)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "test", self.test_acc)

    def configure_optimizers(self) -> Any:
        cfg = self.optim_config
        optimizer_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        optimizer = optimizer_cls(self.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        max_iters = cfg.max_iters or int(self.trainer.estimated_stepping_batches)
        scheduler = CosineWarmupScheduler(optimizer, warmup=cfg.warmup, max_iters=max(max_iters, 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
