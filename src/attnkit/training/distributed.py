"""What evaluation needs from a multi-process (DDP) run beyond Lightning's metric syncing."""

from __future__ import annotations

from typing import Any, TypeVar

import torch.distributed as dist

__all__ = ["gather_lists"]

T = TypeVar("T")


def gather_lists(items: list[T]) -> list[T]:
    """Every process's ``items`` (any picklable objects, e.g. decoded sentences) in one list, rank
    0's first, returned on every process; ``items`` itself outside a multi-process run.

    For figures that are not sums of per-example numbers torchmetrics could add up, e.g. a corpus
    score computed by a library from the texts themselves.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return list(items)
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, list(items))
    return [item for part in parts for item in part]
