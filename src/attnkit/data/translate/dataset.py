"""The translate task's pairs: split by source sentence, encoded in memory or read from the token cache,
batched by length with :class:`attnkit.data.samplers.LengthGroupedBatches`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from attnkit.data.cache import CachedRows, CachedTexts, LazySequence
from attnkit.data.readers.pairs import Pair
from attnkit.data.splits import SPLITS, group_split
from attnkit.text.tokenizers import Tokenizer, tokenizer_from_dict

__all__ = [
    "CachedPairs",
    "EncodedPairs",
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


def tokenizers_from_artifacts(artifacts: dict[str, Any]) -> tuple[Tokenizer, Tokenizer]:
    """``(source, target)`` tokenizers from :meth:`PairsDataModule.artifacts` (the same object if shared)."""
    if not isinstance(artifacts, dict) or "src_tokenizer" not in artifacts:
        raise ValueError("translation artifacts must hold 'src_tokenizer' (and 'tgt_tokenizer', None when shared)")
    src = tokenizer_from_dict(artifacts["src_tokenizer"])
    tgt = src if artifacts.get("tgt_tokenizer") is None else tokenizer_from_dict(artifacts["tgt_tokenizer"])
    return src, tgt
