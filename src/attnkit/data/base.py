"""What the data modules share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from pydantic import field_validator
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from attnkit.config import StrictModel

__all__ = ["DataConfig", "SplitDataModule"]


class DataConfig(StrictModel):
    """The base of the ``data`` section of every task: pydantic, unknown keys rejected, values
    coerced as in every other section (``"8"`` from a command line or ``**{"data.seq_len": "8"}``
    is the int 8; ``"eight"`` or ``1.5`` is an error naming the key). Path fields (``source`` ...)
    also accept a ``pathlib.Path`` (stored as ``str``)."""

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
        comes from a generator seeded with ``seed`` (the same order for the same seed).

        The loader is stateful (``torchdata``'s :class:`StatefulDataLoader`, with its stateful
        sampler): Lightning saves its position and generator in every checkpoint and restores them,
        so a run resumed mid-epoch continues with the very batches it would have seen, and the
        epochs after with the same orders. The generator is the sampler's alone (the loader draws
        nothing from it), so the orders do not depend on how often a loader was started."""
        generator = torch.Generator().manual_seed(seed)
        return StatefulDataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=RandomSampler(dataset, generator=generator) if shuffle else None,
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
