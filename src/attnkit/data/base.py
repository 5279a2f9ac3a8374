"""What the data modules share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from pydantic import ConfigDict, field_validator
from torch.utils.data import DataLoader, Dataset

from attnkit.config import StrictModel

__all__ = ["DataConfig", "SplitDataModule"]


class DataConfig(StrictModel):
    """The base of the ``data`` section of every task: pydantic in strict mode (``"1"`` is not an
    int, ``1`` is not a bool), unknown keys rejected. Path fields (``source`` ...) also accept a
    ``pathlib.Path`` (stored as ``str``)."""

    model_config = ConfigDict(strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _paths_as_strings(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value


class SplitDataModule(L.LightningDataModule):
    """A data module of train/val/test splits: subclasses build one loader in :meth:`_loader`;
    the training split is shuffled, validation and test keep their order."""

    batch_size: int
    num_workers: int

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        raise NotImplementedError

    def _seeded_loader(self, dataset: Dataset, shuffle: bool, seed: int, collate_fn: Callable[..., Any]) -> DataLoader:
        """A loader of ``dataset`` with the module's batch size and workers; when shuffled, its order
        comes from a generator seeded with ``seed`` (the same order for the same seed)."""
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(seed) if shuffle else None,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_fn,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
