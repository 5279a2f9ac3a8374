"""Input checks the model families share."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_ids"]


def check_ids(ids: Tensor, vocab_size: int) -> None:
    """Token ids must be an integer tensor with values in ``[0, vocab_size)`` (a clear error otherwise)."""
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"token ids must be an integer tensor, got dtype {ids.dtype}")
    # One device-to-host read for both bounds; skipped while torch.compile traces the model (a value
    # read there would split the compiled graph in two at every call).
    if not ids.numel() or torch.compiler.is_compiling():
        return
    lo, hi = (int(v) for v in torch.stack(torch.aminmax(ids)).tolist())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}), got min {lo} and max {hi}; "
            "the input was encoded with a different vocabulary, or vocab_size is too small"
        )
