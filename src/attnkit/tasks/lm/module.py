"""The lm task's LightningModule: next-token loss, perplexity and bits per character."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import SumMetric

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.training.module import ClassifierModule

__all__ = ["LanguageModelModule"]


class LanguageModelModule(ClassifierModule):
    """Next-token cross-entropy (ignored targets: padding and ``<bos>``); logs besides
    ``loss``/``acc`` (next-token accuracy) the split's perplexity ``ppl = exp(mean loss per
    token)`` and bits per character ``bpc = total loss in bits / characters of the text predicted``
    (each document's characters plus one for its end, predicted as ``<eos>``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Summed over every batch of every process (torchmetrics adds the processes' sums), in
        # float64 so that the order of the additions does not show in the figures.
        self.nll_sum = torch.nn.ModuleDict({s: SumMetric().set_dtype(torch.float64) for s in ("val", "test")})
        self.token_count = torch.nn.ModuleDict({s: SumMetric().set_dtype(torch.float64) for s in ("val", "test")})
        self._batch_nll: tuple[Tensor, Tensor] | None = None

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        inputs, targets = batch
        # Every position, the ignored ones at IGNORE_INDEX (padding, <bos>): no boolean index, whose
        # data-dependent shape would make the host wait for the device every step.
        logits, targets = self.model(inputs).flatten(0, 1), targets.flatten()
        nll = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")
        count = (targets != IGNORE_INDEX).sum()
        self._batch_nll = (nll.detach(), count)
        return nll / count.clamp_min(1), logits, targets

    def _sums(self, stage: str) -> tuple[SumMetric, SumMetric]:
        """The stage's summed negative log-likelihood and token count."""
        nll_sum, token_count = self.nll_sum[stage], self.token_count[stage]
        assert isinstance(nll_sum, SumMetric) and isinstance(token_count, SumMetric)
        return nll_sum, token_count

    def _accumulate(self, stage: str) -> None:
        assert self._batch_nll is not None
        nll, count = self._batch_nll
        nll_sum, token_count = self._sums(stage)
        nll_sum.update(nll)
        token_count.update(count.to(torch.float64))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        if not self.is_padding("val", batch_idx):  # a padding batch is run, never counted
            self._accumulate("val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        if not self.is_padding("test", batch_idx):
            self._accumulate("test")

    def _log_text_metrics(self, stage: str) -> None:
        nll_sum, token_count = self._sums(stage)
        nll, count = nll_sum.compute(), token_count.compute()
        nll_sum.reset()
        token_count.reset()
        if self.trainer.sanity_checking or float(count) == 0:
            return
        # nll and count are the whole split's (summed over the processes), so the figures are the
        # same on every process; the "max" sync keeps them bit-exact and tells Lightning they are global.
        self.log(f"{stage}/ppl", torch.exp(nll / count), sync_dist=True, reduce_fx="max")
        datamodule = getattr(self.trainer, "datamodule", None)
        if isinstance(datamodule, LanguageModelDataModule) and datamodule.documents:
            bpc = nll / math.log(2) / datamodule.num_chars(stage)
            self.log(f"{stage}/bpc", bpc, sync_dist=True, reduce_fx="max")

    def on_validation_epoch_end(self) -> None:
        self._log_text_metrics("val")

    def on_test_epoch_end(self) -> None:
        self._log_text_metrics("test")
