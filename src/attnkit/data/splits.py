"""Train/validation/test splits, one module for every task: by fraction, stratified by label,
group-aware (no group in two splits, as scikit-learn's ``GroupShuffleSplit``) and fixed by files.

Every function returns a split id per example (``0`` train, ``1`` val, ``2`` test) as an ``int8``
NumPy array, or index lists, and is deterministic in ``seed``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

import numpy as np

__all__ = [
    "SPLITS",
    "TEST",
    "TRAIN",
    "VAL",
    "fixed_split",
    "fraction_split",
    "group_split",
    "split_indices",
    "stratified_split",
]

SPLITS = ("train", "val", "test")
TRAIN, VAL, TEST = 0, 1, 2


def _held_out_counts(n: int, fractions: Sequence[float], keep_one: bool, minimum: int = 0) -> list[int]:
    """``round(n * f)`` (half up) for each fraction, at least ``minimum``; at least one item stays in
    training when ``keep_one``."""
    counts = [max(minimum, math.floor(n * f + 0.5)) if f > 0 else 0 for f in fractions]
    while keep_one and sum(counts) > n - 1 and any(counts):
        counts[counts.index(max(counts))] -= 1
    return counts


def fraction_split(n: int, val_fraction: float, test_fraction: float, seed: int, *, minimum: int = 0) -> np.ndarray:
    """Split ids of ``n`` examples: a seeded shuffle, then ``round(n * fraction)`` (at least
    ``minimum`` each) go to validation and test; the rest (at least one) is training."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val, n_test = _held_out_counts(n, [val_fraction, test_fraction], keep_one=True, minimum=minimum)
    out = np.zeros(n, dtype=np.int8)
    ordered = np.asarray(order, dtype=np.int64)
    out[ordered[:n_val]] = VAL
    out[ordered[n_val : n_val + n_test]] = TEST
    return out


def stratified_split(labels: Sequence[int], fractions: Sequence[float], seed: int) -> tuple[list[int], list[list[int]]]:
    """Seeded stratified split of indices ``0 .. len(labels) - 1``.

    For every class, ``round(n_class * f)`` indices go to each held-out part ``f`` in
    ``fractions``; the rest stays. At least one example of every class stays in the first
    part (when a class has a single example, nothing of it is held out).

    Returns:
        ``(rest, [part_0, part_1, ...])``, each list of indices in increasing order.
    """
    rng = random.Random(seed)
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(int(y), []).append(i)
    rest: list[int] = []
    parts: list[list[int]] = [[] for _ in fractions]
    for y in sorted(by_class):
        idx = by_class[y]
        rng.shuffle(idx)
        counts = _held_out_counts(len(idx), fractions, keep_one=True)
        start = 0
        for part, c in zip(parts, counts):
            part.extend(idx[start : start + c])
            start += c
        rest.extend(idx[start:])
    return sorted(rest), [sorted(p) for p in parts]


def group_split(groups: Sequence[Hashable], val_fraction: float, test_fraction: float, seed: int) -> np.ndarray:
    """Split ids such that all examples of a group share a split (no group in two splits).

    Distinct groups (in order of first appearance) are shuffled with ``seed``; ``round(n_groups *
    fraction)`` of them go to validation and to test. Used by translation (a group is a source
    sentence: all its translations go to one split) and for user data with a group column.
    """
    distinct = list(dict.fromkeys(groups))
    order = list(range(len(distinct)))
    random.Random(seed).shuffle(order)
    n_val, n_test = round(len(distinct) * val_fraction), round(len(distinct) * test_fraction)
    split_of: dict[Hashable, int] = {}
    for rank, i in enumerate(order):
        split_of[distinct[i]] = VAL if rank < n_val else TEST if rank < n_val + n_test else TRAIN
    return np.fromiter((split_of[g] for g in groups), dtype=np.int8, count=len(groups))


def fixed_split(sizes: dict[str, int]) -> np.ndarray:
    """Split ids of examples that come in fixed files, concatenated in the order train, val, test."""
    unknown = sorted(set(sizes) - set(SPLITS))
    if unknown:
        raise ValueError(f"fixed_split: unknown split names {unknown}; use {list(SPLITS)}")
    return np.concatenate([np.full(sizes.get(name, 0), i, dtype=np.int8) for i, name in enumerate(SPLITS)])


def split_indices(split_ids: np.ndarray) -> dict[str, list[int]]:
    """``{"train": [...], "val": [...], "test": [...]}``: the indices of each split, in increasing order."""
    return {name: np.flatnonzero(split_ids == i).tolist() for i, name in enumerate(SPLITS)}
