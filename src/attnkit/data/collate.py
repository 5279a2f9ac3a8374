"""Batching helpers shared by the tasks and by interop: slicing, padding and collating.

Masks are True at real tokens (True = may attend).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnkit.text.tokenizer_kinds import EOS_ID, PAD_ID

__all__ = [
    "BatchedTensorDataset",
    "TranslationBatch",
    "chunks",
    "collate_pairs",
    "collate_text_batch",
    "identity_collate",
    "pad_sequences",
]


class BatchedTensorDataset(Dataset):
    """Tensors indexed along dim 0; a whole batch is fetched with one indexing op (``__getitems__``),
    not item by item, so loading costs nothing next to the model."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors or any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("tensors must be non-empty and share their first dimension")
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, ...]:
        idx = torch.as_tensor(indices)
        return tuple(t[idx] for t in self.tensors)


def identity_collate(batch: Any) -> Any:
    """Collate for :class:`BatchedTensorDataset`: the batch is already stacked."""
    return batch


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in consecutive slices of at most ``size``."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"batch size must be an int >= 1, got {size!r}")
    for start in range(0, len(items), size):
        yield items[start : start + size]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``(ids [B, T] int64, mask [B, T] bool)`` with ``T`` the longest sequence; True = real token."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    width = int(lengths.max()) if len(seqs) else 0
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        if len(s):
            ids[row, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    return ids, mask


def collate_text_batch(batch: Sequence[tuple[Sequence[int], int]], pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """``[(ids, label), ...]`` -> ``(ids [B, T] int64, mask [B, T] bool, labels [B] int64)``,
    padded with ``pad_id`` to the longest sequence of the batch."""
    ids, mask = pad_sequences([item[0] for item in batch], pad_id)
    labels = torch.tensor([int(item[1]) for item in batch], dtype=torch.long)
    return ids, mask, labels


TranslationBatch = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def collate_pairs(items: Sequence[tuple[list[int], list[int], int]]) -> TranslationBatch:
    """Pad encoded pairs into ``(src, src_mask, tgt_in, tgt_out, index)`` (see the module docstring)."""
    src, src_mask = pad_sequences([s for s, _, _ in items], PAD_ID)
    tgt, _ = pad_sequences([t for _, t, _ in items], PAD_ID)
    tgt_out = tgt[:, 1:].clone()
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == EOS_ID, PAD_ID)  # EOS is never a decoder input
    return src, src_mask, tgt_in, tgt_out, torch.tensor([i for _, _, i in items], dtype=torch.long)
