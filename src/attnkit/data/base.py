"""What the Lightning data modules share, including how a multi-process (DDP) run shards its data.

attnkit's data modules shard their own data (the runner turns off Lightning's sampler injection):
a training split is cut into one disjoint shard per process with the same number of batches on
every process (DDP synchronises gradients at every step, so a process with a batch fewer would hang
the others), reshuffled per epoch from the seed (Lightning calls ``set_epoch``); an evaluation
split is dealt out as :class:`EvalBatches`, every example exactly once and as many batches on every
process (padding batches, which count in no metric, where a process runs out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from attnkit.data.samplers import EpochDistributedSampler, ShuffledOrder

__all__ = [
    "EvalBatches",
    "SplitDataModule",
    "TestDataModule",
    "process_shard",
]


def process_shard(datamodule: L.LightningDataModule) -> tuple[int, int]:
    """``(number of processes, rank of this one)`` of the Lightning run ``datamodule`` is attached
    to; ``(1, 0)`` outside a run."""
    trainer = datamodule.trainer
    if trainer is None:
        return 1, 0
    return int(trainer.world_size), int(trainer.global_rank)


class EvalBatches(Sampler[list[int]]):
    """Evaluation batches of one of ``num_replicas`` processes: the batches a single process makes
    (``batch_size`` consecutive examples, in order), dealt round robin: rank ``r`` gets batches
    ``r``, ``r + num_replicas``, ..., then padding batches, so that every process gets as many
    batches, ``ceil(batches / num_replicas)``.

    Every example is evaluated exactly once, in the same batch as in a one-process run, so metrics
    summed over the processes equal the one-process figures (Lightning's
    :class:`~torch.utils.data.DistributedSampler` instead repeats examples so that every process
    gets as many, and counts them twice). Every process must run as many batches: under FSDP
    (``trainer.strategy=fsdp``) every forward pass is a collective (each block's weights are
    all-gathered from every process), so a process with a batch more would wait forever for the
    others. A process whose turn comes after the split's last batch gets a *padding batch* instead
    (:meth:`is_padding`): the split's first example alone, which the module runs like any batch and
    counts in no metric (:meth:`attnkit.training.module.TaskModule.is_padding`). A split of fewer
    batches than processes leaves some processes only padding batches; an empty split, no batch on
    any process. One process gets the one-process batches, never a padding batch.
    """

    def __init__(self, size: int, batch_size: int, num_replicas: int, rank: int, split: str = "evaluation") -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} out of range for {num_replicas} processes (0 <= rank < processes)")
        if size < 0 or batch_size < 1:
            raise ValueError(
                f"the {split} split's batches need a size >= 0 and a batch size >= 1, got {size} and {batch_size}"
            )
        self.size, self.batch_size, self.num_replicas, self.rank = size, batch_size, num_replicas, rank
        batches = -(-size // batch_size)
        self.real = len(range(rank, batches, num_replicas))  # this process's batches of the split
        self.length = -(-batches // num_replicas)  # every process's, padding included

    def __iter__(self) -> Iterator[list[int]]:
        step = self.batch_size * self.num_replicas
        for start in range(self.rank * self.batch_size, self.size, step):
            yield list(range(start, min(start + self.batch_size, self.size)))
        for _ in range(self.length - self.real):
            yield [0]

    def __len__(self) -> int:
        return self.length

    def is_padding(self, index: int) -> bool:
        """Whether this process's batch number ``index`` (from 0, in the order given) is a padding batch,
        to run and leave out of every metric."""
        return self.real <= index < self.length


class SplitDataModule(L.LightningDataModule):
    """A data module of train/val/test splits: subclasses build one loader in :meth:`_loader`;
    the training split is shuffled, validation and test keep their order."""

    batch_size: int
    num_workers: int

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        raise NotImplementedError

    def _seeded_loader(
        self,
        dataset: Dataset,
        shuffle: bool,
        seed: int | None,
        collate_fn: Callable[..., Any],
        split: str = "evaluation",
    ) -> DataLoader:
        """A loader of ``dataset`` with the module's batch size and workers.

        One process: when shuffled, the order (:class:`~attnkit.data.samplers.ShuffledOrder`) comes
        from a generator seeded with ``seed`` (``None``: the seed of torch's global generator, which
        the run seeds), the same order for the same seed. Several processes (see the module
        docstring): a shuffled split gets an
        :class:`EpochDistributedSampler` (seeded the same way, the same on every process; the last
        ``len % processes`` examples of each epoch's order are left out, so that the shards are
        disjoint and equal), an ordered one :class:`EvalBatches`.

        The loader is stateful (``torchdata``'s :class:`StatefulDataLoader`): Lightning saves its
        position (and the stateful sampler's generator, or epoch) in every checkpoint and restores
        them, so a run resumed mid-epoch continues with the very batches it would have seen. The generator is
        the sampler's alone (the loader draws nothing from it), so the orders do not depend on how
        often a loader was started."""
        common: dict[str, Any] = dict(
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0, collate_fn=collate_fn
        )
        assert isinstance(dataset, Sized)  # map-style datasets, all with a length
        seed = torch.initial_seed() if seed is None else seed
        world, rank = process_shard(self)
        if world > 1 and shuffle:
            sampler = EpochDistributedSampler(
                dataset,
                num_replicas=world,
                rank=rank,
                shuffle=True,
                seed=seed,
                drop_last=True,
            )
            return StatefulDataLoader(dataset, batch_size=self.batch_size, sampler=sampler, **common)
        if world > 1:
            batches = EvalBatches(len(dataset), self.batch_size, world, rank, split)
            return StatefulDataLoader(dataset, batch_sampler=batches, **common)
        order = ShuffledOrder(dataset, torch.Generator().manual_seed(seed)) if shuffle else None
        return StatefulDataLoader(dataset, batch_size=self.batch_size, sampler=order, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


class TestDataModule(L.LightningDataModule):
    """Only a test split: ``dataset`` in batches of ``batch_size``, in order (``attnkit test --data``)."""

    def __init__(self, dataset: Dataset, batch_size: int, collate_fn: Callable[..., Any] | None = None) -> None:
        super().__init__()
        self.dataset, self.batch_size, self.collate_fn = dataset, batch_size, collate_fn

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=False, collate_fn=self.collate_fn)
