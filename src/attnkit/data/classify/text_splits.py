"""The classify task's splits as texts and labels (no Lightning here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TextSplits", "take"]


@dataclass
class TextSplits:
    """Raw texts and integer labels (``0 .. len(label_names) - 1``) of the three splits."""

    train_texts: Sequence[str]
    train_labels: list[int]
    val_texts: Sequence[str]
    val_labels: list[int]
    test_texts: Sequence[str]
    test_labels: list[int]
    label_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for split in ("train", "val", "test"):
            n_texts, n_labels = len(getattr(self, f"{split}_texts")), len(getattr(self, f"{split}_labels"))
            if n_texts != n_labels:
                raise ValueError(f"TextSplits: {split} has {n_texts} texts but {n_labels} labels")

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def sizes(self) -> dict[str, int]:
        """Number of texts per split."""
        return {"train": len(self.train_texts), "val": len(self.val_texts), "test": len(self.test_texts)}


def take(items: Sequence[Any], idx: Sequence[int]) -> list[Any]:
    return [items[i] for i in idx]
