"""What the data modules share."""

from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader

__all__ = ["SplitDataModule"]


class SplitDataModule(L.LightningDataModule):
    """A data module of train/val/test splits: subclasses build one loader in :meth:`_loader`;
    the training split is shuffled, validation and test keep their order."""

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
