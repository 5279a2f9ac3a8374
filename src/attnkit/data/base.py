"""What the data modules share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

__all__ = ["SplitDataModule", "invalid_data_value"]


def invalid_data_value(name: str, value: Any, allowed: str) -> NoReturn:
    """Raise the error for a bad ``data.<name>`` config value, saying what is allowed."""
    raise ValueError(f"data.{name}={value!r} is invalid; allowed: {allowed}")


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
