"""Built-in synthetic data: the reverse task (no download)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attnkit.data.base import DataConfig, SplitDataModule
from attnkit.data.generators.reverse import reverse_sequences

__all__ = ["BatchedTensorDataset", "ReverseDataConfig", "ReverseDataModule", "identity_collate", "reverse_sequences"]


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


class ReverseDataConfig(DataConfig):
    """Random sequences of ``num_categories`` symbols; the label is the sequence reversed."""

    num_categories: int = Field(10, ge=2, description="symbols in the alphabet")
    seq_len: int = Field(16, ge=1)
    train_size: int = Field(50000, ge=1)
    val_size: int = Field(1000, ge=1)
    test_size: int = Field(10000, ge=1)
    seed: int = 42


class ReverseDataModule(SplitDataModule):
    """Train/val/test splits of the reverse task, each from its own seed. Batches are
    ``(inputs [B, T], labels [B, T])`` of symbol ids."""

    def __init__(self, cfg: ReverseDataConfig, batch_size: int = 128, num_workers: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.splits: dict[str, BatchedTensorDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        c = self.cfg
        sizes = {"train": c.train_size, "val": c.val_size, "test": c.test_size}
        for offset, (split, size) in enumerate(sizes.items()):
            self.splits[split] = BatchedTensorDataset(
                *reverse_sequences(size, c.seq_len, c.num_categories, c.seed + offset)
            )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        # The training order comes from its own seed (after the three splits' data seeds).
        return self._seeded_loader(self.splits[split], shuffle, self.cfg.seed + 3, identity_collate, split)

    def artifacts(self) -> dict[str, Any]:
        return {"data": self.cfg.model_dump()}
