"""What the data modules share."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from pydantic import ConfigDict, field_validator
from torch.utils.data import DataLoader, Dataset

from attnkit.config import StrictModel

__all__ = [
    "DataConfig",
    "SplitDataModule",
    "TestDataModule",
    "chunks",
    "numbered_inputs",
    "read_lines",
]


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


class TestDataModule(L.LightningDataModule):
    """Only a test split: ``dataset`` in batches of ``batch_size``, in order (``attnkit test --data``)."""

    def __init__(self, dataset: Dataset, batch_size: int, collate_fn: Callable[..., Any] | None = None) -> None:
        super().__init__()
        self.dataset, self.batch_size, self.collate_fn = dataset, batch_size, collate_fn

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=False, collate_fn=self.collate_fn)


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (``"-"``: standard input), without line ends; blank lines kept."""
    if str(path) != "-" and not Path(path).is_file():
        raise FileNotFoundError(f"input file {path} does not exist")
    data = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            lines.append(raw.decode("utf-8").removeprefix("\ufeff") if number == 1 else raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{path}:{number}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
            ) from None
    return lines


def numbered_inputs(path: str | Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of every non-blank line of a UTF-8 text file (``"-"``: standard input)."""
    inputs = [(number, line) for number, line in enumerate(read_lines(path), start=1) if line.strip()]
    if not inputs:
        raise ValueError(f"{path}: no inputs (every line is blank)")
    return inputs


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in consecutive slices of at most ``size``."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"batch size must be an int >= 1, got {size!r}")
    for start in range(0, len(items), size):
        yield items[start : start + size]
