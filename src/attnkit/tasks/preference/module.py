"""The dpo and kto tasks' LightningModules: the policy is the module's model, the reference the same model with
its LoRA adapters switched off (no second copy) or, when every weight is trained, a frozen copy of the base
(``reference``, kept in eval mode).

With ``loss.precompute_reference=true`` the reference log-probabilities of every record of the train, val and test
splits are computed once, at the start of training (:meth:`PreferenceModule.on_fit_start`: the policy then is the
base; with LoRA, its adapters switched off), in batches, under ``no_grad``, and looked up by the batches' record
indices after; no reference copy is built. They are kept in every checkpoint with a digest of their split's data,
so a resumed run (whose policy is no longer the base) uses them as they were. Under DDP each process computes an
equal share of each split's records and every process then holds all of them (``all_gather``): a shuffled epoch
may deal any record to any process."""

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
        self.precompute = bool(self.loss_config.get("precompute_reference", False))
        # split -> {"fingerprint": the split's data digest, "logps": [records, 2] (see reference_columns)}
        self.precomputed: dict[str, dict[str, Any]] = {}
        self._verified: set[tuple[int, str]] = set()
        self._policy_is_reference = False  # only while the base's log-probs are precomputed
        self._counted = True  # False for an evaluation padding batch (a multi-process run)
        if not is_lora(self.model) and not self.precompute:  # full fine-tuning: a frozen copy (init_weights loads it)
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
        if is_lora(self.model):
            with adapters_disabled(self.model):
                return sequence_logps(self.model, inputs, targets)[0]
        if not self._policy_is_reference:
            raise RuntimeError(
                "loss.precompute_reference=true keeps no reference model: its log-probabilities are looked up by the "
                "batches' record indices (a batch of the run's data module)"
            )
        return sequence_logps(self.model, inputs, targets)[0]

    def reference_columns(self, batch: Any) -> Tensor:
        """The reference log-probabilities a batch's loss needs, ``[B, 2]`` per record (dpo: of the chosen and the
        rejected completion; kto: of the completion and of the KL sequence), computed by the reference."""
        raise NotImplementedError

    def reference_for(self, batch: Any) -> Tensor:
        """:meth:`reference_columns` of ``batch``: computed, or looked up by its record indices (the batch's last
        item) when precomputed."""
        if not self.precompute:
            return self.reference_columns(batch)
        trainer = self.trainer
        split = "train" if trainer.training else "test" if trainer.testing else "val"
        if split not in self.precomputed:
            raise RuntimeError(f"no reference log-probabilities were precomputed for the {split} split")
        index = batch[-1]
        return self.precomputed[split]["logps"][index.to(self.precomputed[split]["logps"].device)]

    @torch.no_grad()
    def _compute_reference(self, datamodule: Any, split: str) -> Tensor:
        """``[records, 2]``: :meth:`reference_columns` of every record of ``split``, this process computing every
        ``world``-th record from its rank in batches of the data's batch size, then gathered."""
        trainer = self.trainer
        world, rank = int(trainer.world_size), int(trainer.global_rank)
        n = len(datamodule.rows(split))
        if n == 0:  # the same on every process
            return torch.zeros(0, 2, device=self.device)
        mine = list(range(rank, n, world))
        share = -(-n // world)
        out = torch.zeros(share, 2, device=self.device)
        size = max(int(datamodule.batch_size), 1)
        training = self.model.training
        self.model.eval()
        self._policy_is_reference = True
        try:
            for start in range(0, share, size):  # as many batches on every process (FSDP's collectives)
                indices = mine[start : start + size]
                batch = datamodule.batch(split, indices or [0])
                batch = tuple(t.to(self.device) for t in batch)
                out[start : start + len(indices)] = self.reference_columns(batch)[: len(indices)].float()
        finally:
            self._policy_is_reference = False
            self.model.train(training)
        if world > 1:  # rank r's j-th record is record j * world + r
            out = trainer.strategy.all_gather(out).transpose(0, 1).reshape(share * world, 2)
        return out[:n]

    def _ensure_reference(self, split: str, *, computable: bool) -> None:
        """Check that ``split``'s precomputed log-probabilities are those of the trainer's data (its digest), or
        compute them when ``computable`` (the policy is the base, or LoRA's adapters can be switched off)."""
        datamodule = self.trainer.datamodule  # type: ignore[attr-defined]  # Lightning sets Trainer.datamodule at run time, undeclared
        if not self.precompute or (id(datamodule), split) in self._verified or split not in datamodule.datasets:
            return
        fingerprint = datamodule.fingerprint(split)
        stored = self.precomputed.get(split)
        if stored is None or stored["fingerprint"] != fingerprint:
            if not (computable or is_lora(self.model)):
                what = "are missing" if stored is None else "were computed for other data"
                raise ValueError(
                    f"the {split} split's precomputed reference log-probabilities (loss.precompute_reference=true) "
                    f"{what}, and this run keeps no reference model to compute them (its weights are trained, not "
                    "the base's): give the run's own data (data.source, data.val_source, data.test_source, "
                    "data.max_len and trainer.batch_size as it was trained), or train a run with "
                    "loss.precompute_reference=false"
                )
            logps = self._compute_reference(datamodule, split)
            self.precomputed[split] = {"fingerprint": fingerprint, "logps": logps}
        self.precomputed[split]["logps"] = self.precomputed[split]["logps"].to(self.device)
        self._verified.add((id(datamodule), split))

    def on_fit_start(self) -> None:
        """Precompute the reference log-probabilities (``loss.precompute_reference``) of every split: at the
        start of a new run the policy is the base; a resumed run has them from its checkpoint."""
        super().on_fit_start()
        fresh = self.trainer.ckpt_path is None
        for split in ("train", "val", "test"):
            self._ensure_reference(split, computable=fresh)

    def on_validation_start(self) -> None:
        super().on_validation_start()
        self._ensure_reference("val", computable=False)

    def on_test_start(self) -> None:
        super().on_test_start()
        self._ensure_reference("test", computable=False)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.precomputed:
            checkpoint["precomputed_reference"] = {
                split: {"fingerprint": v["fingerprint"], "logps": v["logps"].detach().cpu()}
                for split, v in self.precomputed.items()
            }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        stored = checkpoint.get("precomputed_reference") or {}
        self.precomputed = {split: dict(v) for split, v in stored.items()}
        self._verified.clear()

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
        self._counted = counted
        try:
            loss, _, target = self.step(batch)
        finally:
            self._counted = True
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

    def reference_columns(self, batch: Any) -> Tensor:
        inputs, targets = batch[0], batch[1]
        ref = self.reference_logps(inputs, targets)
        pairs = inputs.shape[0] // 2
        return torch.stack((ref[:pairs], ref[pairs:]), dim=1)

    def losses(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], int]:
        inputs, targets = batch[0], batch[1]
        logps, tokens = sequence_logps(self.model, inputs, targets)
        ref = self.reference_for(batch)
        pairs = inputs.shape[0] // 2
        c = self.loss_config
        loss, metrics = dpo_loss(
            logps[:pairs],
            logps[pairs:],
            ref[:, 0],
            ref[:, 1],
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

    def _sum_over_processes(self, value: Tensor) -> Tensor:
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a Trainer (a batch computed directly)
            return value
        return trainer.strategy.reduce(value, reduce_op="sum")

    def reference_columns(self, batch: Any) -> Tensor:
        inputs, targets, _, kl_inputs, kl_targets = batch[:5]
        return torch.stack((self.reference_logps(inputs, targets), self.reference_logps(kl_inputs, kl_targets)), 1)

    def losses(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], int]:
        inputs, targets, labels, kl_inputs, kl_targets = batch[:5]
        ref = self.reference_for(batch)
        with torch.no_grad():
            kl_policy = sequence_logps(self.model, kl_inputs, kl_targets)[0]
            # the mean over every process's KL sequences; a padding batch (evaluation) counts none
            weight = 1.0 if self._counted else 0.0
            sums = torch.stack(((kl_policy - ref[:, 1]).sum(), torch.tensor(float(len(kl_policy)), device=ref.device)))
            sums = self._sum_over_processes(sums * weight)
            kl = (sums[0] / sums[1].clamp(min=1)).clamp(min=0)
        logps, _ = sequence_logps(self.model, inputs, targets)
        c = self.loss_config
        loss, metrics = kto_loss(
            logps,
            ref[:, 0],
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
