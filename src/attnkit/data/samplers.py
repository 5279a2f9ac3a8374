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
    generator=generator)``; each ``iter()`` draws the next epoch's order from ``generator``.

    Epoch ``e``'s order is the generator's ``e``-th draw, also in a loader made anew for a later epoch: Lightning
    calls :meth:`set_epoch` at every epoch's start, and a sampler that has drawn fewer epochs skips their draws
    first. That is what a run resumed from a checkpoint written at an epoch's end needs (Lightning restores no
    loader state then: the loader starts afresh, and without the skip it would repeat epoch 0's order)."""

    def __init__(self, data: Sized, generator: torch.Generator) -> None:
        self.data = data
        self.generator = generator
        self.epochs_drawn: int | None = 0  # orders drawn from the generator so far (None: a restored old state's)

    def set_epoch(self, epoch: int) -> None:
        """At epoch ``epoch``'s start: draw (and drop) the orders of the epochs before it not drawn yet."""
        if self.epochs_drawn is None:  # restored from a state without its epoch: the restored order is this one
            self.epochs_drawn = epoch + 1
            return
        while self.epochs_drawn < epoch:
            torch.randperm(len(self), generator=self.generator)
            self.epochs_drawn += 1

    def __iter__(self) -> Iterator[int]:
        return _ShuffledOrderIterator(self)

    def __len__(self) -> int:
        return len(self.data)


class _ShuffledOrderIterator(Iterator[int]):
    """One epoch of a :class:`ShuffledOrder`; ``state_dict`` / ``load_state_dict`` make it
    torchdata-stateful (the loader saves it in every checkpoint). The epoch's order is drawn at its first
    index (or restored by ``load_state_dict``), not when the iterator is made: Lightning makes the training
    iterator before it calls :meth:`ShuffledOrder.set_epoch`."""

    def __init__(self, sampler: ShuffledOrder) -> None:
        self.sampler = sampler
        self.perm: torch.Tensor | None = None
        self.epoch = -1
        self.yielded = 0
        self.chunk: list[int] = []
        self.chunk_start = 0

    def _draw(self, generator_state: torch.Tensor, yielded: int) -> None:
        generator = self.sampler.generator
        generator.set_state(generator_state)
        self.generator_state = generator_state
        self.perm = torch.randperm(len(self.sampler), generator=generator)
        self.yielded = yielded
        self.chunk = []
        self.chunk_start = yielded

    def _drawn(self) -> torch.Tensor:
        """The epoch's order: the generator's next draw, counted by the sampler."""
        if self.perm is None:
            sampler, drawn = self.sampler, self.sampler.epochs_drawn
            self.epoch = -1 if drawn is None else drawn  # None: unknown until the next set_epoch()
            self._draw(sampler.generator.get_state(), 0)
            sampler.epochs_drawn = None if drawn is None else drawn + 1
        assert self.perm is not None
        return self.perm

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        perm = self._drawn()
        i = self.yielded
        if i >= len(perm):
            raise StopIteration
        j = i - self.chunk_start
        if j >= len(self.chunk):
            self.chunk, self.chunk_start, j = perm[i : i + CHUNK].tolist(), i, 0
        self.yielded = i + 1
        return self.chunk[j]

    def state_dict(self) -> dict[str, Any]:
        self._drawn()
        return {"yielded": self.yielded, "generator": self.generator_state, "epoch": self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        yielded = int(state_dict["yielded"])
        if not 0 <= yielded <= len(self.sampler):
            raise ValueError(f"a saved shuffled order at {yielded} of {len(self.sampler)} examples: not this data")
        self._draw(state_dict["generator"], yielded)
        # The restored order is its epoch's draw: the sampler counts it (a state written before the epoch was
        # saved in it: the next set_epoch() tells which epoch it is).
        self.epoch = int(state_dict.get("epoch", -1))
        self.sampler.epochs_drawn = self.epoch + 1 if self.epoch >= 0 else None


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
