"""The translate task's pairs: split by source sentence, encoded in memory or read from the token cache,
and batched by length."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from attnkit.data.cache import CachedRows, CachedTexts, LazySequence
from attnkit.data.readers.pairs import Pair
from attnkit.data.splits import SPLITS, group_split
from attnkit.text.tokenizers import Tokenizer, tokenizer_from_dict

__all__ = [
    "CachedPairs",
    "EncodedPairs",
    "LengthBatches",
    "PairSplits",
    "PickedItems",
    "TextPairs",
    "split_pairs",
    "tokenizers_from_artifacts",
]


@dataclass
class PairSplits:
    """Deduplicated ``(source, target)`` pairs of the three splits."""

    train: Sequence[Pair]
    val: Sequence[Pair]
    test: Sequence[Pair]

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def split_pairs(
    pairs: Sequence[Pair], val_fraction: float, test_fraction: float, seed: int, *, groups: Sequence[str] | None = None
) -> PairSplits:
    """Remove duplicate pairs (first kept), then split by *source sentence* with ``seed``.

    All translations of one source sentence (Tatoeba often has several) go to the same split, so
    no test source is seen in training: the groups of :func:`attnkit.data.splits.group_split` are
    the source sentences, or, with ``groups`` (one per pair; a duplicate keeps its first pair's),
    those groups. Validation and test get about ``fraction`` of the (deduplicated) *pairs* each;
    pairs keep their file order within a split.
    """
    unique = list(dict.fromkeys(pairs))
    if groups is None:
        group_of = [source for source, _ in unique]
    else:
        first: dict[Pair, str] = {}
        for pair, group in zip(pairs, groups):
            first.setdefault(pair, group)
        group_of = [first[pair] for pair in unique]
    parts = group_split(group_of, [val_fraction, test_fraction], seed)
    out = {name: [unique[i] for i in idx] for name, idx in zip(SPLITS, parts)}
    return PairSplits(**out)


# ====================================================================== batches
class EncodedPairs(Dataset):
    """Item ``i``: ``(source ids + EOS, BOS + target ids + EOS, i)``; ``refs[i]`` is the target text."""

    def __init__(self, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], refs: Sequence[str]) -> None:
        self.src, self.tgt, self.refs = src, tgt, refs

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> tuple[Sequence[int], Sequence[int], int]:
        return self.src[index], self.tgt[index], index

    def lengths(self) -> list[int]:
        """Source + target tokens of every pair (what length-bucketed batches sort by)."""
        return [len(s) + len(t) for s, t in zip(self.src, self.tgt)]


class CachedPairs(EncodedPairs):
    """:class:`EncodedPairs` read from the token cache: ``src``/``tgt`` are lazy sequences of the
    memory-mapped ids, ``refs`` of the cached target texts."""

    src: CachedRows
    tgt: CachedRows

    def lengths(self) -> list[int]:
        return (self.src.lengths() + self.tgt.lengths()).tolist()


class TextPairs(LazySequence):
    """``(source, target)`` text pairs read lazily from two cached text files."""

    def __init__(self, sources: CachedTexts, targets: CachedTexts) -> None:
        self.sources, self.targets = sources, targets

    def __len__(self) -> int:
        return len(self.sources)

    def _get(self, index: int) -> Pair:
        return self.sources[index], self.targets[index]

    def __iter__(self) -> Iterator[Pair]:
        return zip(self.sources, self.targets)


class PickedItems(LazySequence):
    """Items ``index`` of a sequence."""

    def __init__(self, items: Sequence[Any], index: np.ndarray) -> None:
        self.items, self.picked = items, index  # not `self.index`: that would hide Sequence.index()

    def __len__(self) -> int:
        return len(self.picked)

    def _get(self, index: int) -> Any:
        return self.items[int(self.picked[index])]


class LengthBatches(torch.utils.data.Sampler[list[int]]):
    """Shuffled batches of similar-length examples: sort within random pools of 50 batches, then
    shuffle the batches. The order depends on ``seed`` and the epoch (Lightning calls
    :meth:`set_epoch`; otherwise every pass counts as the next epoch).

    With ``num_replicas`` processes every process draws the same batches and takes every
    ``num_replicas``-th (from its ``rank``), all processes the same number: the last
    ``len % num_replicas`` batches of the epoch's order are left out, so no process waits for a
    batch another one lacks."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} out of range for {num_replicas} processes")
        if self._count(len(lengths), batch_size) < num_replicas:
            raise ValueError(
                f"the training split has {len(lengths)} pairs, fewer batches of trainer.batch_size={batch_size} than "
                f"the {num_replicas} processes: lower trainer.batch_size or trainer.devices"
            )
        self.lengths, self.batch_size, self.seed, self.epoch = lengths, batch_size, seed, 0
        self.num_replicas, self.rank = num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rng = random.Random(self.seed * 1000003 + self.epoch)
        self.epoch += 1
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        pool = self.batch_size * 50
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        rng.shuffle(batches)
        return iter(batches[self.rank : len(self) * self.num_replicas : self.num_replicas])

    @staticmethod
    def _count(size: int, batch_size: int) -> int:
        """Batches of one epoch over all processes."""
        pool = batch_size * 50
        full, rest = divmod(size, pool)
        return full * 50 + -(-rest // batch_size)

    def __len__(self) -> int:
        return self._count(len(self.lengths), self.batch_size) // self.num_replicas


def tokenizers_from_artifacts(artifacts: dict[str, Any]) -> tuple[Tokenizer, Tokenizer]:
    """``(source, target)`` tokenizers from :meth:`PairsDataModule.artifacts` (the same object if shared)."""
    if not isinstance(artifacts, dict) or "src_tokenizer" not in artifacts:
        raise ValueError("translation artifacts must hold 'src_tokenizer' (and 'tgt_tokenizer', None when shared)")
    src = tokenizer_from_dict(artifacts["src_tokenizer"])
    tgt = src if artifacts.get("tgt_tokenizer") is None else tokenizer_from_dict(artifacts["tgt_tokenizer"])
    return src, tgt
