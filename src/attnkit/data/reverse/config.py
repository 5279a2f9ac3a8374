"""The reverse task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from pydantic import Field

from attnkit.data.config import DataConfig

__all__ = ["ReverseDataConfig"]


class ReverseDataConfig(DataConfig):
    """Random sequences of ``num_categories`` symbols; the label is the sequence reversed."""

    num_categories: int = Field(10, ge=2, description="symbols in the alphabet")
    seq_len: int = Field(16, ge=1)
    train_size: int = Field(50000, ge=1)
    val_size: int = Field(1000, ge=1)
    test_size: int = Field(10000, ge=1)
