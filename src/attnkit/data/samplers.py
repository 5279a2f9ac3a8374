"""Training orders: :class:`ShuffledOrder`, the split's shuffled order in one process without a Python list of
every index; :class:`EpochDistributedSampler`, a process's stateful shard of it in a multi-process run; and
:class:`LengthGroupedBatches`, resumable batches of similar lengths over any number of processes.

:class:`ShuffledOrder`:

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

from collections.abc import Iterator, Sequence, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

__all__ = ["EpochDistributedSampler", "LengthGroupedBatches", "ShuffledOrder"]

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


class LengthGroupedBatches(Sampler[list[int]]):
    """Training batches of rows of similar lengths (Hugging Face's ``group_by_length``; translate and sft): each epoch's
    seeded shuffle is cut into chunks of ``50 * batch_size`` rows, each chunk sorted by length and cut into batches,
    and the batches shuffled. With several processes, the batches (a multiple of their number) are dealt out
    round robin, so every process gets as many. Each new pass after a whole epoch reshuffles: the sampler
    counts its epochs itself (Lightning calls ``set_epoch`` on a loader's sampler, never on its batch sampler,
    and stops taking batches at ``len()`` without running the iterator to its end); ``set_epoch`` sets one.
    ``state_dict`` keeps the epoch and how many of its batches were given (a resumed run goes on with the
    next)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, num_replicas: int = 1, rank: int = 0):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} out of range for {num_replicas} processes")
        if -(-len(lengths) // batch_size) < num_replicas:
            raise ValueError(
                f"the training split has {len(lengths)} rows, fewer batches of trainer.batch_size={batch_size} than "
                f"the {num_replicas} processes: lower trainer.batch_size or trainer.devices"
            )
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.num_replicas, self.rank = batch_size, seed, num_replicas, rank
        self.epoch = self.given = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:  # not the epoch a resumed run's state left part-way through
            self.given = 0
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.lengths), generator=generator).numpy()
        chunk = 50 * self.batch_size
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            part = part[np.argsort(-self.lengths[part], kind="stable")]
            batches += [part[i : i + self.batch_size].tolist() for i in range(0, len(part), self.batch_size)]
        shuffled = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        keep = len(shuffled) - len(shuffled) % self.num_replicas
        return shuffled[:keep][self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        if self.given >= len(batches):  # the last epoch was given whole: the next one
            self.epoch, self.given = self.epoch + 1, 0
            batches = self._batches()
        for batch in batches[self.given :]:
            self.given += 1
            yield batch

    def __len__(self) -> int:
        return len(self._batches())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "given": self.given}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.given = int(state.get("epoch", 0)), int(state.get("given", 0))


class EpochDistributedSampler(StatefulDistributedSampler):
    """torchdata's stateful :class:`~torch.utils.data.DistributedSampler` (it saves how many indices it
    gave this epoch) that also saves its epoch, the seed of the epoch's order.

    Lightning creates the training iterator of a resumed run before it calls ``set_epoch``: without
    its epoch restored, a run resumed mid-epoch would go on with the remaining batches of epoch 0's
    order instead of those of the epoch it was stopped in.
    """

    epoch: int  # DistributedSampler's (torchdata is untyped)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.epoch = int(state_dict.get("epoch", self.epoch))
