"""Preference data as batches: pairs for dpo, unpaired feedback for kto (see :mod:`attnkit.data.preference`).

A dpo batch of ``B`` pairs is ``(inputs [2B, T], targets [2B, T])``: the ``B`` chosen sequences, then the ``B``
rejected ones in the same order (:func:`attnkit.data.preference.encode.collate_sequences`). A kto batch of ``B``
records is ``(inputs, targets, labels [B] bool, kl_inputs, kl_targets)``: the records, whether each is
desirable, and the mismatched sequences KTO's KL term is estimated on (TRL's: the records taken in chunks of the
batch size in the split's order, prompt ``i`` of a chunk with the completion of record ``i - 1`` of that chunk, the
first with the last's; fixed per record, whatever batch a shuffled epoch puts it in). The data module's loaders add
each batch's record indices in its split (``index [B]``, a long tensor) as the batch's last item: what precomputed
reference log-probabilities are looked up by (``loss.precompute_reference``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attnkit.data.base import SplitDataModule
from attnkit.data.preference.config import PreferenceDataConfig
from attnkit.data.preference.encode import (
    Encoded,
    collate_sequences,
    common_prefix,
    encode_prompt,
    encode_with_completion,
    fit,
)
from attnkit.data.preference.read import Feedback, Pair, read_feedback, read_pairs
from attnkit.data.sft.artifacts import chat_artifacts
from attnkit.data.splits import SPLITS, read_split_sources
from attnkit.text.chat import ChatTemplate
from attnkit.text.tokenizers import Tokenizer

__all__ = [
    "PreferenceDataModule",
    "collate_feedback",
    "collate_pairs",
    "encode_feedback",
    "encode_pair",
    "mismatched",
    "with_index",
]

logger = logging.getLogger(__name__)


def encode_pair(
    tokenizer: Tokenizer, template: ChatTemplate | None, pair: Pair, max_len: int
) -> tuple[tuple[Encoded, Encoded] | None, bool]:
    """``((chosen, rejected) or None, cut)``: the pair's two sequences, their prompt the part both share with
    the prompt encoded alone (TRL's ``prompt_len``), each cut to ``max_len``; ``None`` when either keeps no
    completion token."""
    prompt = encode_prompt(tokenizer, template, pair.prompt)
    chosen = encode_with_completion(tokenizer, template, pair.prompt, pair.chosen)
    rejected = encode_with_completion(tokenizer, template, pair.prompt, pair.rejected)
    start = min(common_prefix(prompt, chosen), common_prefix(prompt, rejected))
    (c, cut_c), (r, cut_r) = fit(chosen, start, max_len), fit(rejected, start, max_len)
    return (None if c is None or r is None else (c, r)), cut_c or cut_r


def encode_feedback(
    tokenizer: Tokenizer, template: ChatTemplate | None, record: Feedback, max_len: int
) -> tuple[Encoded | None, bool]:
    """``(sequence or None, cut)`` of one unpaired record (see :func:`encode_pair`)."""
    prompt = encode_prompt(tokenizer, template, record.prompt)
    ids = encode_with_completion(tokenizer, template, record.prompt, record.completion)
    return fit(ids, common_prefix(prompt, ids), max_len)


def collate_pairs(rows: Sequence[tuple[Encoded, Encoded]], pad_id: int) -> tuple[Tensor, Tensor]:
    """A dpo batch: the chosen sequences, then the rejected ones (see the module docstring)."""
    return collate_sequences([c for c, _ in rows] + [r for _, r in rows], pad_id)


def mismatched(sequences: Sequence[Encoded], max_len: int) -> list[Encoded]:
    """KTO's KL sequences of ``sequences`` (TRL's): prompt ``i`` with the completion of ``i - 1``, the first with the
    last's, cut to ``max_len``."""
    out = []
    for i, s in enumerate(sequences):
        other = sequences[i - 1]
        ids = (s.ids[: s.prompt_len] + other.ids[other.prompt_len :])[:max_len]
        out.append(Encoded(ids, min(s.prompt_len, len(ids) - 1)))
    return out


def collate_feedback(
    rows: Sequence[tuple[Encoded, bool] | tuple[Encoded, bool, Encoded]], pad_id: int, max_len: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """A kto batch (see the module docstring). Rows ``(sequence, label, kl_sequence)`` bring their KL sequences
    (the data module's, paired in chunks of the split); rows ``(sequence, label)`` are paired within the batch
    (:func:`mismatched`), the KL sequences cut to ``max_len`` too."""
    sequences = [row[0] for row in rows]
    inputs, targets = collate_sequences(sequences, pad_id)
    labels = torch.tensor([row[1] for row in rows], dtype=torch.bool)
    given = [row[2] for row in rows if len(row) == 3]  # the rows of three only
    kl_sequences = given if len(given) == len(rows) else mismatched(sequences, max_len)
    kl_inputs, kl_targets = collate_sequences(kl_sequences, pad_id)
    return inputs, targets, labels, kl_inputs, kl_targets


def with_index(collate: Any, items: Sequence[tuple[int, Any]]) -> tuple[Any, ...]:
    """``collate``'s batch of the rows of ``items`` (``(index, row)``), then the indices (a long tensor)."""
    return (*collate([row for _, row in items]), torch.tensor([i for i, _ in items], dtype=torch.long))


class _Rows(Dataset):
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Any:
        return index, self.rows[index]


class PreferenceDataModule(SplitDataModule):
    """Train/val/test preference records of ``cfg`` (``kind``: ``"pairs"`` for dpo, ``"feedback"`` for kto),
    encoded with ``tokenizer`` and ``template`` for a model of context ``context``.

    ``setup()`` reads the files, splits ``source`` (whole groups with ``data.group_column``), encodes every
    record, cuts those longer than ``data.max_len`` (default: the context) and drops those whose prompt alone
    fills it, and logs the counts (also in :attr:`counts`)."""

    def __init__(
        self,
        cfg: PreferenceDataConfig,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        *,
        kind: Literal["pairs", "feedback"],
        context: int,
        pad_id: int,
        batch_size: int = 8,
        num_workers: int = 0,
        generation_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        what = "prompt/chosen/rejected pairs" if kind == "pairs" else "prompt/completion/label records"
        if not cfg.source:
            raise ValueError(f"data.source is required: a .jsonl file (or Parquet/Arrow data) of {what}")
        max_len = cfg.max_len or context
        if max_len > context:
            raise ValueError(f"data.max_len={cfg.max_len} is longer than the model's context ({context}); set it to "
                             f"{context} or less")  # fmt: skip
        self.cfg, self.tokenizer, self.template, self.kind, self.context = cfg, tokenizer, template, kind, context
        self.max_len, self.pad_id, self.batch_size, self.num_workers = max_len, pad_id, batch_size, num_workers
        self.generation_config = dict(generation_config or {})
        self.records: dict[str, list[Any]] = {}
        self.datasets: dict[str, _Rows] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def artifacts(self) -> dict[str, Any]:
        """The tokenizer, chat template and generation config stored in the run's checkpoints."""
        return {**chat_artifacts(self.tokenizer, self.template, self.generation_config), "context": self.context}

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _read_file(self, path: str) -> list[Any]:
        reader = read_pairs if self.kind == "pairs" else read_feedback
        return reader(path, group_key=self.cfg.group_column)

    def _read(self) -> dict[str, list[Any]]:
        return read_split_sources(self.cfg, self._read_file)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.records = self._read()
        for split in SPLITS:
            rows: list[Any] = []
            cut = dropped = 0
            for record in self.records[split]:
                try:
                    if self.kind == "pairs":
                        row, was_cut = encode_pair(self.tokenizer, self.template, record, self.max_len)
                    else:
                        encoded, was_cut = encode_feedback(self.tokenizer, self.template, record, self.max_len)
                        row = None if encoded is None else (encoded, record.label)
                except ValueError as err:
                    raise ValueError(f"{record.where}: {err}") from None
                cut += was_cut
                if row is None:
                    dropped += 1
                else:
                    rows.append(row)
            if self.kind == "feedback":  # the KL pairs, fixed per record: chunks of the batch size (TRL's)
                for start in range(0, len(rows), self.batch_size):
                    chunk = rows[start : start + self.batch_size]
                    kl = mismatched([s for s, _ in chunk], self.max_len)
                    rows[start : start + self.batch_size] = [(s, label, k) for (s, label), k in zip(chunk, kl)]
            self.counts[split] = {"records": len(self.records[split]), "cut": cut, "dropped": dropped}
            if cut or dropped:
                logger.warning(
                    "%s %s: %d of %d records were cut at data.max_len=%d tokens; %d of them kept no completion token "
                    "and were dropped", self.kind, split, cut, len(self.records[split]), self.max_len, dropped,
                )  # fmt: skip
            if not rows and split == "train":
                raise ValueError(f"data.source={self.cfg.source}: no training record is left to learn from")
            self.datasets[split] = _Rows(rows)

    def rows(self, split: str) -> list[Any]:
        """The encoded rows of ``split`` (after :meth:`setup`), in its order: a row's place is its index in the
        batches' last item."""
        return self.datasets[split].rows

    def fingerprint(self, split: str) -> str:
        """A digest of ``split``'s encoded rows (their token ids, prompt lengths, labels, KL sequences): the same
        for the same data, tokenizer, template, ``data.max_len`` and batch size (kto's KL pairs)."""
        digest = hashlib.sha256(self.kind.encode())
        for row in self.rows(split):
            for item in row:
                digest.update(repr((item.ids, item.prompt_len) if isinstance(item, Encoded) else item).encode())
        return digest.hexdigest()

    def prompts(self, split: str = "val", n: int = 3) -> list[tuple[Any, Any]]:
        """Up to ``n`` records of ``split``: the prompt and the chosen (dpo) or a desirable (kto) completion."""
        out = []
        for record in self.records.get(split, []):
            if isinstance(record, Pair):
                out.append((record.prompt, record.chosen))
            elif record.label:
                out.append((record.prompt, record.completion))
            if len(out) == n:
                break
        return out

    def _collate(self) -> Any:
        if self.kind == "pairs":
            collate: Any = functools.partial(collate_pairs, pad_id=self.pad_id)
        else:
            collate = functools.partial(collate_feedback, pad_id=self.pad_id, max_len=self.max_len)
        return functools.partial(with_index, collate)

    def batch(self, split: str, indices: Sequence[int]) -> tuple[Any, ...]:
        """The batch of ``split``'s rows ``indices`` as the loaders make it (the indices its last item)."""
        dataset = self.datasets[split]
        return self._collate()([dataset[i] for i in indices])

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"PreferenceDataModule: call setup() before {split}_dataloader()")
        return self._seeded_loader(self.datasets[split], shuffle, self.cfg.seed, self._collate(), split)
