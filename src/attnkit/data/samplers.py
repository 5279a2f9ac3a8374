"""The training split's shuffled order in one process, without a Python list of every index.

torchdata's stateful ``RandomSampler`` turns each epoch's permutation into a Python list
(``torch.randperm(n).tolist()``): at 14 M training blocks (1 GB of text) that is about 0.5 GB and
2 s before the first batch, every epoch and at every warm start. :class:`ShuffledOrder` gives the
same order (the same ``torch.randperm`` draw from the same generator) but keeps the permutation as
an ``int64`` tensor and turns it into Python ints a chunk at a time.

Its iterator is stateful with the same state as torchdata's (``yielded``, and ``generator``: the
generator's state before the epoch's draw), so checkpoints written with either resume with either;
a resumed iterator draws the epoch's permutation again and starts at ``yielded`` without stepping
through the ones before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler

__all__ = ["ShuffledOrder"]

CHUNK = 1 << 14  # indices turned into Python ints at a time


class ShuffledOrder(Sampler[int]):
    """Every index of ``data`` once per epoch, in the order of ``torch.randperm(len(data),
    generator=generator)``; each ``iter()`` draws the next epoch's order from ``generator``."""

    def __init__(self, data: Sized, generator: torch.Generator) -> None:
        self.data = data
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        return _ShuffledOrderIterator(self)

    def __len__(self) -> int:
        return len(self.data)


class _ShuffledOrderIterator(Iterator[int]):
    """One epoch of a :class:`ShuffledOrder`; ``state_dict`` / ``load_state_dict`` make it
    torchdata-stateful (the loader saves it in every checkpoint)."""

    def __init__(self, sampler: ShuffledOrder) -> None:
        self.sampler = sampler
        self._draw(sampler.generator.get_state(), 0)

    def _draw(self, generator_state: torch.Tensor, yielded: int) -> None:
        generator = self.sampler.generator
        generator.set_state(generator_state)
        self.generator_state = generator_state
        self.perm = torch.randperm(len(self.sampler), generator=generator)
        self.yielded = yielded
        self.chunk: list[int] = []
        self.chunk_start = yielded

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        i = self.yielded
        if i >= len(self.perm):
            raise StopIteration
        j = i - self.chunk_start
        if j >= len(self.chunk):
            self.chunk, self.chunk_start, j = self.perm[i : i + CHUNK].tolist(), i, 0
        self.yielded = i + 1
        return self.chunk[j]

    def state_dict(self) -> dict[str, Any]:
        return {"yielded": self.yielded, "generator": self.generator_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        yielded = int(state_dict["yielded"])
        if not 0 <= yielded <= len(self.sampler):
            raise ValueError(f"a saved shuffled order at {yielded} of {len(self.sampler)} examples: not this data")
        self._draw(state_dict["generator"], yielded)
