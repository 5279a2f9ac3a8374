"""The reverse task's Lightning data module (built-in synthetic data, no download)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from attnkit.data.base import SplitDataModule
from attnkit.data.collate import BatchedTensorDataset, identity_collate
from attnkit.data.generators.reverse import reverse_sequences
from attnkit.data.reverse.config import ReverseDataConfig

__all__ = ["ReverseDataModule"]


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
