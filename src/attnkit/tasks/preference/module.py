"""The dpo and kto tasks' LightningModules: the policy is the module's model, the reference the same model with
its LoRA adapters switched off (no second copy) or, when every weight is trained, a frozen copy of the base
(``reference``, kept in eval mode)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnkit.models import build_model
from attnkit.models.lora import is_lora
from attnkit.tasks.preference.losses import dpo_loss, kto_loss, sequence_logps
from attnkit.training.module import TaskModule

__all__ = ["DPOModule", "KTOModule", "PreferenceModule", "adapters_disabled"]


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block ``model`` computes what its base does: every LoRA layer's adapters switched off (peft's
    ``BaseTunerLayer.enable_adapters``, what ``PeftModel.disable_adapter()`` does), switched on again after."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)


class PreferenceModule(TaskModule):
    """What dpo and kto share: the reference model and its log-probabilities, and metrics logged under TRL's
    names (``<stage>/rewards/chosen``...), the validation and test ones as means over the split."""

    metric_names: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss_config: dict[str, Any] = dict(self.hparams["config"].get("loss") or {})
        self.reference: nn.Module | None = None
        if not is_lora(self.model):  # full fine-tuning: a frozen copy (the task's init_weights loads the base)
            model = self.hparams["model"]
            self.reference = build_model(model["name"], model["config"]).requires_grad_(False).eval()
        self._stats: dict[str, Tensor] = {}
        self._weights: dict[str, int] = {}  # metrics that are means over part of a batch: that part's size

    def train(self, mode: bool = True) -> PreferenceModule:
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()
        return self

    def metrics(self) -> dict[str, Metric]:
        return {"loss": MeanMetric(), **{name.replace("/", "_"): MeanMetric() for name in self.metric_names}}

    @torch.no_grad()
    def reference_logps(self, inputs: Tensor, targets: Tensor) -> Tensor:
        """The reference model's summed completion log-probabilities ``[N]``."""
        if self.reference is not None:
            return sequence_logps(self.reference, inputs, targets)[0]
        with adapters_disabled(self.model):
            return sequence_logps(self.model, inputs, targets)[0]

    def losses(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], int]:
        """``(loss, metrics, examples)`` of a batch."""
        raise NotImplementedError

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        loss, self._stats, n = self.losses(batch)
        none = torch.zeros(n, device=loss.device)
        return loss, none, none

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        if self._logging_step():
            for name, value in self._stats.items():
                self.log(f"train/{name}", value, on_step=True, on_epoch=False)
        return loss

    def _evaluate(self, batch: Any, stage: str, counted: bool = True) -> Tensor:
        loss, _, target = self.step(batch)
        metrics = self.stage_metrics[stage]
        assert isinstance(metrics, nn.ModuleDict)
        values = {"loss": loss.detach(), **{k.replace("/", "_"): v for k, v in self._stats.items()}}
        for key, metric in metrics.items():
            assert isinstance(metric, Metric)
            value = values[key]
            name = "loss" if key == "loss" else next(n for n in self.metric_names if n.replace("/", "_") == key)
            if counted and not torch.isnan(value):
                metric.update(value, max(self._weights.get(name, int(target.numel())), 1))
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=key == "loss")
        return loss


class DPOModule(PreferenceModule):
    """DPO (sigmoid, robust or IPO loss; ``loss.beta``, ``loss.label_smoothing``) on batches of pairs
    (:mod:`attnkit.data.preference.module`: the chosen sequences, then the rejected ones)."""

    metric_names = (
        "rewards/chosen",
        "rewards/rejected",
        "rewards/accuracies",
        "rewards/margins",
        "logps/chosen",
        "logps/rejected",
    )

    def losses(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], int]:
        inputs, targets = batch
        logps, tokens = sequence_logps(self.model, inputs, targets)
        ref = self.reference_logps(inputs, targets)
        pairs = inputs.shape[0] // 2
        c = self.loss_config
        loss, metrics = dpo_loss(
            logps[:pairs],
            logps[pairs:],
            ref[:pairs],
            ref[pairs:],
            beta=float(c.get("beta", 0.1)),
            loss_type=str(c.get("loss_type", "sigmoid")),
            label_smoothing=float(c.get("label_smoothing", 0.0)),
            chosen_tokens=tokens[:pairs],
            rejected_tokens=tokens[pairs:],
        )
        return loss, metrics, pairs


class KTOModule(PreferenceModule):
    """KTO (``loss.beta``, ``loss.desirable_weight``, ``loss.undesirable_weight``) on batches of unpaired
    completions; the KL term from the batch's mismatched sequences, averaged over every process."""

    metric_names = ("rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "kl")

    def _mean_over_processes(self, value: Tensor) -> Tensor:
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a Trainer (a batch computed directly)
            return value
        return trainer.strategy.reduce(value, reduce_op="mean")

    def losses(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], int]:
        inputs, targets, labels, kl_inputs, kl_targets = batch
        with torch.no_grad():
            kl_policy = sequence_logps(self.model, kl_inputs, kl_targets)[0]
            kl = (kl_policy - self.reference_logps(kl_inputs, kl_targets)).mean()
            kl = self._mean_over_processes(kl).clamp(min=0)
        logps, _ = sequence_logps(self.model, inputs, targets)
        ref = self.reference_logps(inputs, targets)
        c = self.loss_config
        loss, metrics = kto_loss(
            logps,
            ref,
            labels,
            kl,
            beta=float(c.get("beta", 0.1)),
            desirable_weight=float(c.get("desirable_weight", 1.0)),
            undesirable_weight=float(c.get("undesirable_weight", 1.0)),
        )
        chosen = int(labels.sum())
        rejected = int(labels.numel()) - chosen
        self._weights = {"rewards/chosen": chosen, "logps/chosen": chosen, "rewards/rejected": rejected,
                         "logps/rejected": rejected}  # fmt: skip
        return loss, metrics, int(inputs.shape[0])
