"""The LightningModule every task builds on: optimiser, schedule, metrics and logging."""

from __future__ import annotations

from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from attnkit.data.base import EvalBatches
from attnkit.models import build_model
from attnkit.models.lora import LoraConfig, apply_lora, base_fingerprint, is_lora
from attnkit.nn import IGNORE_INDEX
from attnkit.training.config import OptimConfig
from attnkit.training.lora import keep_trained_tensors, restore_base_tensors
from attnkit.training.schedule import CosineWarmupScheduler
from attnkit.training.sharding import ShardingPlan, fix_mmap_threshold, is_sharded, shard_model

__all__ = ["ClassifierModule", "TaskModule"]


class TaskModule(L.LightningModule):
    """Wraps an attnkit model for training; subclasses define :meth:`step` for their task and
    declare their evaluation metrics with :meth:`metrics`.

    Everything needed to rebuild the module is in its hyper-parameters (saved in every
    checkpoint): the task name, the resolved task config, the model's registry name and full
    config, the data artifacts (e.g. a vocabulary) and the number of classes of the model's
    outputs (for class metrics; None when there are none).
    """

    # Also count correct predictions (``logits.argmax(-1) == target``) while training, logged as
    # ``train/acc_step`` / ``train/acc_epoch``: for modules whose outputs are class scores.
    train_accuracy: ClassVar[bool] = False
    # Modules of the model trained in full besides the adapters when the config has ``model.lora``
    # (e.g. a new classification head).
    lora_train_modules: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        task: str,
        config: dict[str, Any],
        model: dict[str, Any],
        artifacts: dict[str, Any],
        attnkit_version: str,
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(model["name"], model["config"])
        lora = (config.get("model") or {}).get("lora")
        if lora:  # adapters on a frozen base: the task's init_weights loads the base (model.init)
            lora_cfg = LoraConfig.model_validate(lora)
            extra = [m for m in self.lora_train_modules if m not in lora_cfg.train_modules]
            apply_lora(self.model, lora_cfg.model_copy(update={"train_modules": [*lora_cfg.train_modules, *extra]}))
        self._lora_base_sha = ""
        # Set by the runner for trainer.strategy=fsdp: configure_model shards the model with it.
        self.sharding: ShardingPlan | None = None
        self.optim_config = OptimConfig.model_validate(config["optim"])
        self._step_targets: Tensor | int = 0  # targets of the optimiser step's accumulated batches (on this process)
        self._train_sums = torch.zeros(3)  # this epoch's summed loss, correct predictions, predictions
        self.last_train_loss: Tensor | None = None  # the last training batch's mean loss (weight snapshots)
        # One copy of the metrics per stage: their states must not mix.
        self.stage_metrics = nn.ModuleDict({stage: nn.ModuleDict(self.metrics()) for stage in ("val", "test")})

    def configure_model(self) -> None:
        """Lightning's hook, before the optimiser is made: shard the model for ``trainer.strategy=fsdp``
        (:mod:`attnkit.training.sharding`; once, also when fit, validate and test each call it). On
        the CPU, large buffers freed are then returned to the system (:func:`fix_mmap_threshold`)."""
        if self.sharding is not None and not is_sharded(self.model):
            mesh = self.device_mesh  # ModelParallelStrategy's (sharding.strategy_for)
            if mesh is None:
                raise RuntimeError("trainer.strategy=fsdp: the Trainer's strategy made no device mesh to shard over")
            if self.device.type == "cpu":
                fix_mmap_threshold()
            shard_model(self.model, mesh["data_parallel"], self.sharding)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Lightning's step; a sharded model's gradients are then dropped at once (Lightning would drop
        them only before the next backward pass, holding them through the next forward pass). Steps
        come only at the end of a step's accumulated batches: nothing accumulated is lost."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        if self.sharding is not None:
            optimizer.zero_grad(set_to_none=True)

    def metrics(self) -> dict[str, Metric]:
        """The validation and test metrics, logged as ``<stage>/<name>`` per epoch; each gets
        ``update(logits, target)`` with :meth:`step`'s outputs. Built anew per stage. None by default
        (the loss is always logged)."""
        return {}

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        """``batch`` -> ``(loss, logits [N, C], target [N])`` with padding removed or its targets at
        ``IGNORE_INDEX`` (not counted), or, instead of the logits, the predicted classes ``[N]`` (the accuracy
        metrics take either)."""
        raise NotImplementedError

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.model(*args, **kwargs)

    def is_padding(self, stage: str, batch_idx: int) -> bool:
        """Whether evaluation batch ``batch_idx`` of ``stage`` (``"val"`` or ``"test"``) is a padding batch of
        a multi-process run (:class:`attnkit.data.base.EvalBatches`): one that a process whose share of the
        split ran out runs so that every process runs as many batches (under FSDP each forward pass is a
        collective every process must join), and that counts in no metric."""
        loaders = self.trainer.val_dataloaders if stage == "val" else self.trainer.test_dataloaders
        sampler = getattr(loaders, "batch_sampler", None)
        return isinstance(sampler, EvalBatches) and sampler.is_padding(batch_idx)

    def _evaluate(self, batch: Any, stage: str, counted: bool = True) -> Tensor:
        """Validation / test step: ``<stage>/loss`` and each metric's ``<stage>/<name>``, over the epoch.

        A batch not ``counted`` (a padding batch, :meth:`is_padding`) runs the same forward pass and logs the
        same names, with no weight: the loss as 0 over 0 examples, the metrics not updated (every process
        must log the same names, which Lightning syncs at the epoch's end)."""
        loss, logits, target = self.step(batch)
        if counted:
            self.log(f"{stage}/loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
        else:
            nothing = torch.zeros((), device=loss.device)
            self.log(f"{stage}/loss", nothing, on_epoch=True, prog_bar=True, sync_dist=True, batch_size=0)
        metrics = self.stage_metrics[stage]
        assert isinstance(metrics, nn.ModuleDict)
        for name, metric in metrics.items():
            assert isinstance(metric, Metric)  # built by metrics()
            if counted:
                metric.update(logits.detach(), target)
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        # Every step only adds to three sums. Values go to Lightning's `self.log` only on the steps
        # its loggers write (every `trainer.log_every_n_steps`) and once per epoch: each `self.log`
        # call (and each torchmetrics update) costs Python bookkeeping on the order of a
        # millisecond, a large share of a small model's step (see benchmarks/training_overhead.py).
        # Nothing here waits for the device: counts stay tensors (a `.item()`, a boolean index or a tensor
        # made from a Python number would stall the host until the step's kernels ran, every step).
        loss, logits, target = self.step(batch)
        with torch.no_grad():
            counted = target != IGNORE_INDEX  # a step may give targets it does not count (lm: padding)
            n = counted.sum()
            if self.train_accuracy:
                correct = ((_predicted(logits) == target) & counted).sum()
            else:
                correct = torch.zeros((), device=loss.device)
            step_sums = torch.stack([loss.detach().float() * n, correct.float(), n.float()])
            self._train_sums += step_sums  # float32 whatever the precision of the step (bf16 would lose counts)
            self.last_train_loss = loss.detach()
            if self._logging_step():
                self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False, prog_bar=True)
                if self.train_accuracy:
                    acc = correct / n.clamp_min(1)
                    self.log("train/acc_step", acc, on_step=True, on_epoch=False, prog_bar=True)
        if self._accumulating():
            # The summed loss; on_before_optimizer_step divides by the step's total target count.
            self._step_targets = self._step_targets + n
            return loss * n
        return loss

    def _accumulating(self) -> bool:
        return int(self.trainer.accumulate_grad_batches) > 1

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """With ``trainer.accumulate_grad_batches`` k > 1, make the step's gradient that of the mean loss
        over every target of its batches (on every process), i.e. of the one batch made of them.

        Lightning divides each batch's loss by k: averaging per-batch means would weight a batch of
        few targets (short, padded sequences) like one of many. Each batch's summed loss was
        back-propagated instead (:meth:`training_step`); the gradients, averaged over the processes,
        are scaled here by ``k * processes / targets``. Gradient clipping comes after this hook.
        """
        if not self._accumulating():
            return
        count = torch.as_tensor(self._step_targets, device=self.device).to(torch.float64)
        total = float(self.trainer.strategy.reduce(count, reduce_op="sum"))
        self._step_targets = 0
        scale = self.trainer.accumulate_grad_batches * self.trainer.world_size / max(total, 1.0)
        for param in self.parameters():
            if param.grad is not None:
                param.grad.mul_(scale)

    def _logging_step(self) -> bool:
        """Whether Lightning's loggers write the step being trained: its rule (the step's number is a
        multiple of ``log_every_n_steps``) from the trainer's public attributes."""
        trainer = self.trainer
        every = trainer.log_every_n_steps  # type: ignore[attr-defined]  # Lightning sets it in Trainer.__init__, undeclared
        return bool(trainer.loggers) and (trainer.global_step + 1) % every == 0

    def on_train_epoch_start(self) -> None:
        self._train_sums = torch.zeros(3, device=self.device)

    def on_train_epoch_end(self) -> None:
        # Summed over every process of a multi-process run, then divided: the epoch's exact means,
        # the same on every process (the "max" sync keeps them and tells Lightning they are global).
        loss_sum, correct, count = self.trainer.strategy.reduce(self._train_sums, reduce_op="sum").tolist()
        self.log("train/loss_epoch", loss_sum / max(count, 1), prog_bar=True, sync_dist=True, reduce_fx="max")
        if self.train_accuracy:
            self.log("train/acc_epoch", correct / max(count, 1), prog_bar=True, sync_dist=True, reduce_fx="max")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val", counted=not self.is_padding("val", batch_idx))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test", counted=not self.is_padding("test", batch_idx))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A LoRA run's checkpoints keep only the trained tensors and a reference to the base
        (see :mod:`attnkit.training.lora`)."""
        if is_lora(self.model):
            self._lora_base_sha = self._lora_base_sha or base_fingerprint(self.model)  # the base is frozen
            init = (self.hparams["config"].get("model") or {}).get("init")
            keep_trained_tensors(checkpoint, self.model, "model.", {"init": init, "sha256": self._lora_base_sha})

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A LoRA checkpoint: check that the base loaded in the model is the one it was trained on and
        complete its state dict with the base's tensors."""
        sha = restore_base_tensors(checkpoint, self.model, "model.", self.state_dict())
        self._lora_base_sha = sha or self._lora_base_sha

    def configure_optimizers(self) -> Any:
        cfg = self.optim_config
        optimizer_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        trainable = [p for p in self.parameters() if p.requires_grad]  # a LoRA run: the adapters only
        # Not `fused=True`: Lightning's mixed-precision plugin refuses gradient clipping with a fused optimiser.
        optimizer = optimizer_cls(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
        # Without optim.max_iters the period is the run's number of steps, set in on_train_start: asking
        # the trainer for it here (`estimated_stepping_batches`) would set up the training data before
        # a resumed run's checkpoint is restored, and the data loader would lose its position.
        scheduler = CosineWarmupScheduler(optimizer, warmup=cfg.warmup, max_iters=cfg.max_iters or 1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        if self.optim_config.max_iters is None:
            # The first learning rate (step 0) does not depend on the period: only later ones do.
            scheduler = self.lr_schedulers()
            assert isinstance(scheduler, CosineWarmupScheduler)
            scheduler.max_iters = max(int(self.trainer.estimated_stepping_batches), 1)


class ClassifierModule(TaskModule):
    """A module whose outputs are scores over ``num_classes`` classes (per example, per position or
    per token): accuracy while training and ``<stage>/acc`` (micro-averaged) in validation and test."""

    train_accuracy = True

    def metrics(self) -> dict[str, Metric]:
        num_classes = self.hparams.get("num_classes")
        if not num_classes:
            raise ValueError(
                f"{type(self).__name__} counts accuracy over classes: its task's model_spec() must give "
                "ModelSpec(num_classes=...)"
            )
        # Targets at IGNORE_INDEX (e.g. an lm batch's padding) are not counted.
        return {"acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX)}


def _predicted(scores: Tensor) -> Tensor:
    """The predicted classes of :meth:`TaskModule.step`'s second output: logits' argmax, or the classes."""
    return scores.argmax(-1) if scores.is_floating_point() else scores
