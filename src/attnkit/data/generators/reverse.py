"""The built-in reverse task: random symbol sequences and their reversal."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["reverse_sequences"]


def reverse_sequences(size: int, seq_len: int, num_categories: int, seed: int) -> tuple[Tensor, Tensor]:
    """``(inputs [size, seq_len], labels [size, seq_len])`` int64; labels are inputs reversed."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(num_categories, (size, seq_len), generator=generator)
    return inputs, inputs.flip(-1)
