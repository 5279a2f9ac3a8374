"""Learning-rate schedule: linear warm-up, then cosine decay, stepped per batch."""

from __future__ import annotations

import math

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["CosineWarmupScheduler", "cosine_warmup_factor"]


def cosine_warmup_factor(step: int, warmup: int, max_iters: int) -> float:
    """``0.5 * (1 + cos(pi * step / max_iters))``, times ``step / warmup`` during warm-up.

    The factor multiplies the base learning rate. It starts at 0, reaches ~1 after ``warmup``
    steps and decays to 0 at ``max_iters`` (and stays there after).
    """
    if max_iters <= 0:
        raise ValueError(f"max_iters must be positive, got {max_iters}")
    factor = 0.5 * (1.0 + math.cos(math.pi * min(step, max_iters) / max_iters))
    if warmup > 0 and step <= warmup:
        factor *= step / warmup
    return factor


class CosineWarmupScheduler(LRScheduler):
    """Sets each group's lr to ``base_lr * cosine_warmup_factor(step, warmup, max_iters)``."""

    def __init__(self, optimizer: Optimizer, warmup: int, max_iters: int, last_epoch: int = -1) -> None:
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        if max_iters <= 0:
            raise ValueError(f"max_iters must be positive, got {max_iters}")
        self.warmup = warmup
        self.max_iters = max_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float | Tensor]:  # a base lr may be a tensor (torch's LRScheduler)
        factor = cosine_warmup_factor(self.last_epoch, self.warmup, self.max_iters)
        return [base_lr * factor for base_lr in self.base_lrs]
