"""Anomaly sets: ``set_size - 1`` items of one class and one of another, drawn vectorised and
reproducibly from a seed; the dataset, its per-epoch sampler and sets read from a user file."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnkit.data.anomaly.config import check_int
from attnkit.data.samplers import EpochDistributedSampler

__all__ = ["EpochShuffleSampler", "SetAnomalyDataset", "build_anomaly_sets", "mix_seed"]


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A 63-bit seed that depends on every value (so (seed, epoch, index) streams do not collide)."""
    h = 0x243F6A8885A308D3
    for v in values:
        h = _splitmix64(h ^ (int(v) & _MASK64))
    return h >> 1


class _ClassTable:
    """Items grouped by class: class ``c`` (``classes[c]``) owns ``order[start[c] : start[c] + count[c]]``."""

    def __init__(self, labels: Tensor) -> None:
        self.classes, self.count = torch.unique(labels, return_counts=True)
        self.order = torch.argsort(labels, stable=True)
        self.start = torch.cumsum(self.count, 0) - self.count


def build_anomaly_sets(
    labels: Tensor, set_size: int, num_sets: int, generator: torch.Generator, *, max_elements: int = 1 << 22
) -> tuple[Tensor, Tensor]:
    """Draw ``num_sets`` anomaly sets from items with ``labels [N]``, vectorised.

    For each set: a class ``c`` uniformly among the classes with ``set_size - 1`` items, ``set_size - 1``
    distinct items of ``c``, one item of a uniformly chosen other class, then a random order.

    Returns:
        ``(items [num_sets, set_size], target [num_sets])`` int64: item rows and the anomaly's position.
    """
    return _build_sets(_ClassTable(labels), set_size, num_sets, generator, max_elements=max_elements)


def _build_sets(
    table: _ClassTable, set_size: int, num_sets: int, generator: torch.Generator, *, max_elements: int = 1 << 22
) -> tuple[Tensor, Tensor]:
    m = set_size - 1
    k = len(table.classes)
    eligible = torch.nonzero(table.count >= m).flatten()
    if k < 2 or len(eligible) == 0:
        raise ValueError(
            f"cannot build sets of set_size={set_size}: need >= 2 classes and one with >= {m} items, "
            f"got class sizes {table.count.tolist()}"
        )
    max_count = int(table.count[eligible].max())
    chunk = max(1, max_elements // max_count)
    items_out, target_out = [], []
    for s0 in range(0, num_sets, chunk):
        s = min(chunk, num_sets - s0)
        # normal class and m distinct members: the m smallest of random keys over its (padded) member slots
        c = eligible[torch.randint(len(eligible), (s,), generator=generator)]
        keys = torch.rand(s, max_count, generator=generator)
        keys.masked_fill_(torch.arange(max_count) >= table.count[c].unsqueeze(1), 2.0)
        slots = torch.topk(keys, m, dim=1, largest=False, sorted=False).indices  # [s, m]
        normal = table.order[table.start[c].unsqueeze(1) + slots]
        # anomaly: a uniformly chosen other class, then a uniform member of it
        a = (c + 1 + torch.randint(k - 1, (s,), generator=generator)) % k
        j = (torch.rand(s, generator=generator) * table.count[a]).long().clamp_max_(table.count[a] - 1)
        anomaly = table.order[table.start[a] + j]
        # shuffle positions; the anomaly sits at column m before shuffling
        sets = torch.cat([normal, anomaly.unsqueeze(1)], dim=1)
        perm = torch.argsort(torch.rand(s, set_size, generator=generator), dim=1)
        items_out.append(torch.gather(sets, 1, perm))
        target_out.append(torch.argmax((perm == m).to(torch.int64), dim=1))
    return torch.cat(items_out), torch.cat(target_out)


class SetAnomalyDataset(Dataset[tuple[Tensor, Tensor]]):
    """Anomaly sets over item ``features [N, D]`` with class ``labels [N]``.

    Item ``i`` is ``(x [set_size, D] float32, target int64 scalar)``: ``x[target]`` is the one item of a
    different class. ``fixed=True`` draws all sets once from ``seed`` (same sets every epoch and run).
    ``fixed=False`` draws new sets every epoch: set ``i`` of epoch ``e`` is a function of ``(seed, e, i)``
    only (row ``i`` of the epoch's sets, drawn vectorised with a local generator seeded by ``(seed, e)``
    on first access and kept for that epoch), so every epoch is reproducible and the global RNG is
    untouched. Index with ``(epoch, i)`` to override the epoch selected by :meth:`set_epoch`.
    """

    def __init__(
        self, features: Tensor, labels: Tensor, set_size: int, num_sets: int, *, seed: int, fixed: bool
    ) -> None:
        check_int("set_size", set_size, 2)
        check_int("num_sets", num_sets, 1)
        if features.ndim != 2 or labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise ValueError(
                f"expected features [N, D] and labels [N], got {tuple(features.shape)} and {tuple(labels.shape)}"
            )
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
        self.features = features.to(torch.float32)
        self.labels = labels.to(torch.int64)
        self.set_size = int(set_size)
        self.num_sets = int(num_sets)
        self.seed = int(seed)
        self.fixed = bool(fixed)
        self.epoch = 0
        self._table = _ClassTable(self.labels)
        self.items: Tensor | None = None  # [num_sets, set_size] item rows when fixed
        self.targets: Tensor | None = None  # [num_sets]
        self._epoch_cache: tuple[int, Tensor, Tensor] | None = None
        if self.fixed:
            generator = torch.Generator().manual_seed(mix_seed(self.seed, 0xF1CED))
            self.items, self.targets = _build_sets(self._table, self.set_size, self.num_sets, generator)
        else:  # fail now rather than in a worker
            self.epoch_sets(0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose sets ``fixed=False`` draws (no effect when fixed)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_sets

    def epoch_sets(self, epoch: int | None = None) -> tuple[Tensor, Tensor]:
        """All sets of ``epoch`` (default: the current one): ``(items [num_sets, set_size], targets [num_sets])``.

        ``items`` are rows of ``features``; for ``fixed=True`` the fixed sets, whatever the epoch.
        """
        if self.fixed:
            assert self.items is not None and self.targets is not None
            return self.items, self.targets
        epoch = self.epoch if epoch is None else int(epoch)
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            generator = torch.Generator().manual_seed(mix_seed(self.seed, epoch))
            self._epoch_cache = (epoch, *_build_sets(self._table, self.set_size, self.num_sets, generator))
        return self._epoch_cache[1], self._epoch_cache[2]

    def set_items(self, index: int, epoch: int | None = None) -> tuple[Tensor, Tensor]:
        """``(item rows [set_size], target)`` of set ``index`` (in ``epoch``, default the current one)."""
        if not -self.num_sets <= index < self.num_sets:
            raise IndexError(f"set index {index} out of range for {self.num_sets} sets")
        items, targets = self.epoch_sets(epoch)
        return items[index], targets[index]

    def __getitem__(self, index: int | tuple[int, int]) -> tuple[Tensor, Tensor]:
        if isinstance(index, tuple):
            epoch, i = index
            items, target = self.set_items(int(i), epoch)
        else:
            items, target = self.set_items(int(index))
        return self.features[items], target.clone()


class EpochShuffleSampler(EpochDistributedSampler):
    """Shuffles the sets of ``dataset`` per epoch (seeded by ``(seed, epoch)``) and yields ``(epoch, index)``.

    Carrying the epoch in the index keeps random training sets reproducible per epoch even in
    DataLoader worker processes. Lightning calls :meth:`set_epoch` at every epoch start; it is
    forwarded to the dataset. With ``num_replicas > 1`` each rank gets every ``num_replicas``-th
    index of the shuffled order, all ranks as many: the last ``len % num_replicas`` sets of the
    epoch's order are left out (``drop_last`` of :class:`DistributedSampler`), so the shards are
    disjoint. Stateful like the other tasks' training samplers (:class:`EpochDistributedSampler`: its epoch and
    how many sets it gave), so a run resumed mid-epoch goes on with the very sets it would have drawn.
    """

    dataset: SetAnomalyDataset
    next_yielded: int | None  # torchdata's StatefulDistributedSampler (untyped): a restored position
    yielded: int

    def __init__(
        self,
        dataset: SetAnomalyDataset,
        seed: int,
        *,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.epoch)

    def _pairs(self) -> Iterator[tuple[int, int]]:
        n = len(self.dataset)
        if self.shuffle:
            generator = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch, 0x5A3B1E))
            order = torch.randperm(n, generator=generator).tolist()
        else:
            order = list(range(n))
        if self.total_size > n:
            order += (order * math.ceil(self.total_size / n))[: self.total_size - n]
        epoch = self.epoch
        for i in order[self.rank : self.total_size : self.num_replicas]:
            yield epoch, i

    def __iter__(self) -> Iterator[tuple[int, int]]:
        start, self.next_yielded = self.next_yielded or 0, None  # a restored state: skip what was given
        self.yielded = start
        for pair in itertools.islice(self._pairs(), start, None):
            self.yielded += 1
            yield pair
