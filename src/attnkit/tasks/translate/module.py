"""The translate task's LightningModule: teacher-forced training, BLEU/chrF/exact match on the test split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.dataset import tokenizers_from_artifacts
from attnkit.tasks.translate.config import DecodeConfig
from attnkit.tasks.translate.decoding import corpus_scores, decode_batch, one_line
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.distributed import gather_lists
from attnkit.training.module import ClassifierModule
from attnkit.training.sharding import gathered_weights

if TYPE_CHECKING:
    from attnkit.models.seq2seq import Seq2SeqTransformer

__all__ = ["TranslateModule"]


class TranslateModule(ClassifierModule):
    """Teacher-forced cross-entropy (label smoothing, padding ignored); token accuracy through
    :class:`TaskModule`'s metric. At the end of a test run the test split is decoded (greedy or beam
    search, per ``decode``) and BLEU, chrF and exact match are logged as ``test/bleu``,
    ``test/chrf``, ``test/exact``."""

    model: Seq2SeqTransformer  # the task's model_spec: ModelSpec("seq2seq", ...)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.hparams["config"]
        self.label_smoothing = float(cfg.get("label_smoothing", 0.0))
        self.decode_config = DecodeConfig.model_validate(cfg.get("decode", {}))
        self.data_config = PairsDataConfig.model_validate(cfg["data"])
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None
        self._hyps: list[str] = []
        self._refs: list[str] = []

    @property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """``(source, target)`` tokenizers, rebuilt from the checkpoint's artifacts."""
        if self._tokenizers is None:
            self._tokenizers = tokenizers_from_artifacts(self.hparams["artifacts"])
        return self._tokenizers

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        src, src_mask, tgt_in, tgt_out, _ = batch
        logits = self.model(src, tgt_in, src_mask)
        valid = tgt_out != self.model.pad_id
        logits, target = logits[valid], tgt_out[valid]
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing), logits, target

    def max_decode_len(self) -> int:
        return self.decode_config.max_len or self.data_config.max_len + 1

    def on_test_epoch_start(self) -> None:
        self._hyps, self._refs = [], []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        src, src_mask, _, _, index = batch
        refs = self.trainer.datamodule.datasets["test"].refs  # type: ignore[attr-defined]  # Lightning sets Trainer.datamodule at run time, undeclared
        d = self.decode_config
        # Sharded (FSDP), every decoding step would be a collective, and each process stops when its own
        # batch is done: the weights are gathered once for the whole batch instead.
        with gathered_weights(self.model):
            hyps = decode_batch(
                self.model, src, src_mask, beam_size=d.beam_size, length_penalty=d.length_penalty,
                max_len=self.max_decode_len(),
            )  # fmt: skip
        if self.is_padding("test", batch_idx):  # run as every process must, never counted
            return
        tgt_tok = self.tokenizers[1]
        self._hyps += [one_line(tgt_tok.decode(ids)) for ids in hyps.token_lists()]
        self._refs += [refs[i] for i in index.tolist()]

    def on_test_epoch_end(self) -> None:
        # A corpus score is not a mean of per-process scores: in a multi-process run every process
        # gathers all translations and references and scores the whole test split (sacrebleu sums
        # the statistics of every sentence). The figures are then identical on every process; the
        # "max" sync keeps them bit-exact and tells Lightning they are global.
        hyps, refs = gather_lists(self._hyps), gather_lists(self._refs)
        for name, value in corpus_scores(hyps, refs).items():
            self.log(f"test/{name}", torch.tensor(value, dtype=torch.float64), sync_dist=True, reduce_fx="max")
