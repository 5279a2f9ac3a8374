"""Train/validation/test splits, one module for every task: by fraction, stratified by label, and
group-aware (no group of examples straddles two splits).

When examples come in groups (passages of one source document, items of one recording, the
translations of one source sentence...), a random split puts members of one group on both sides:
validation then measures memory of the group, not generalisation to new ones, and picks the wrong
checkpoint. :func:`group_split` assigns whole groups, like scikit-learn's ``GroupShuffleSplit``,
while keeping every split's class mix close to the whole data's (``StratifiedGroupKFold``'s aim) and
each part's size close to its fraction of the *examples*.

Every function is deterministic in ``seed``. :class:`TextSplits` holds the three splits of texts and labels
(the classify task's, and what the IMDb reader returns).
"""

from __future__ import annotations

import array
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "SPLITS", "TEST", "TRAIN", "VAL", "TextSplits", "fraction_split", "group_split", "split_records",
    "stratified_split", "take",
]  # fmt: skip

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
    # 8 bytes an example (a list of ints: about 36): the same shuffle, a corpus of 8 M documents 0.3 GB lighter
    order = array.array("q", range(n))
    random.Random(seed).shuffle(order)
    n_val, n_test = _held_out_counts(n, [val_fraction, test_fraction], keep_one=True, minimum=minimum)
    out = np.zeros(n, dtype=np.int8)
    ordered = np.frombuffer(order, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
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


def group_split(
    groups: Sequence[Any] | np.ndarray,
    fractions: Sequence[float],
    seed: int,
    stratify: Sequence[Any] | np.ndarray | None = None,
    *,
    where: str = "the data",
) -> list[np.ndarray]:
    """Split example indices ``0 .. len(groups) - 1`` by group.

    ``fractions``: the share of the examples each *held-out* part should get (e.g. ``[val, test]``);
    the rest is the first part (training). Returns ``[rest, part_0, part_1, ...]``: sorted int64
    index arrays that together hold every index once, and every group's examples all in one of
    them. With ``stratify`` (a label per example), each part's class counts are kept close to
    ``fraction * class count``.

    Groups are visited largest first (ties in a seeded random order) and each goes to the part whose
    squared distance to its target counts (per class) grows least. A held-out part with a fraction
    above 0 always gets at least one group when there are more groups than parts; otherwise a
    ``ValueError`` says that there are too few groups (naming the data ``where``). Deterministic in ``seed``.
    """
    if not isinstance(groups, np.ndarray) and all(isinstance(g, str) for g in groups):
        # strings as their rank in sorted order (what np.unique numbers them by): a numpy string
        # array would take 4 bytes per character of the longest group for every example
        rank = {g: i for i, g in enumerate(sorted(set(groups)))}
        groups = np.fromiter((rank[g] for g in groups), dtype=np.int64, count=len(groups))
    groups = np.asarray(groups)
    n = len(groups)
    if groups.ndim != 1:
        raise ValueError(f"groups must be one value per example (1-D), got shape {groups.shape}")
    fractions = [float(f) for f in fractions]
    if any(not 0.0 <= f < 1.0 for f in fractions) or sum(fractions) >= 1.0:
        raise ValueError(f"fractions must each be in [0, 1) and sum to less than 1, got {fractions}")
    labels = np.zeros(n, dtype=np.int64) if stratify is None else np.asarray(stratify)
    if labels.shape != (n,):
        raise ValueError(f"stratify must hold one label per example ({n}), got shape {labels.shape}")
    parts = [[] for _ in range(len(fractions) + 1)]  # type: list[list[int]]
    if n == 0:
        return [np.zeros(0, dtype=np.int64) for _ in parts]
    _, group_of = np.unique(groups, return_inverse=True)
    _, label_of = np.unique(labels, return_inverse=True)
    num_groups, num_classes = int(group_of.max()) + 1, int(label_of.max()) + 1
    counts = np.zeros((num_groups, num_classes))
    np.add.at(counts, (group_of, label_of), 1)
    shares = np.array([1.0 - sum(fractions), *fractions])
    target = shares[:, None] * counts.sum(0)[None, :]  # [parts, classes]
    required = [p for p in range(1, len(shares)) if shares[p] > 0]
    if required and num_groups <= len(required):
        raise ValueError(
            f"{where} has {num_groups} group(s): too few to hold out whole groups for {len(required)} split(s) "
            "and keep one for training; give more groups, or set the held-out fractions to 0"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(num_groups)
    order = order[np.argsort(-counts[order].sum(1), kind="stable")]  # largest first, random among equals
    filled = np.zeros_like(target)
    empty = set(required)
    assigned = np.empty(num_groups, dtype=np.int64)
    open_parts = [p for p in range(len(shares)) if shares[p] > 0]
    for left, g in zip(range(num_groups, 0, -1), order):
        # as many groups left as empty held-out parts: fill those first
        candidates = sorted(empty) if len(empty) >= left else open_parts
        growth = [float((((filled[p] + counts[g]) - target[p]) ** 2).sum() - ((filled[p] - target[p]) ** 2).sum())
                  for p in candidates]  # fmt: skip
        p = candidates[int(np.argmin(growth))]
        filled[p] += counts[g]
        assigned[g] = p
        empty.discard(p)
    part_of = assigned[group_of]
    return [np.flatnonzero(part_of == p).astype(np.int64) for p in range(len(shares))]


@dataclass
class TextSplits:
    """Raw texts and integer labels (``0 .. len(label_names) - 1``) of the three splits."""

    train_texts: Sequence[str]
    train_labels: list[int]
    val_texts: Sequence[str]
    val_labels: list[int]
    test_texts: Sequence[str]
    test_labels: list[int]
    label_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for split in ("train", "val", "test"):
            n_texts, n_labels = len(getattr(self, f"{split}_texts")), len(getattr(self, f"{split}_labels"))
            if n_texts != n_labels:
                raise ValueError(f"TextSplits: {split} has {n_texts} texts but {n_labels} labels")

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def sizes(self) -> dict[str, int]:
        """Number of texts per split."""
        return {"train": len(self.train_texts), "val": len(self.val_texts), "test": len(self.test_texts)}


def take(items: Sequence[Any], idx: Sequence[int]) -> list[Any]:
    return [items[i] for i in idx]


def split_records(
    records: Sequence[Any],
    val_fraction: float,
    test_fraction: float,
    seed: int,
    *,
    groups: Sequence[Any] | None = None,
    where: str = "",
) -> dict[str, list[Any]]:
    """``records`` cut into ``{"train", "val", "test"}`` lists (in their order): whole ``groups`` per split with
    :func:`group_split` when given, else by fraction (:func:`fraction_split`, at least one training record)."""
    if groups is not None:
        parts = group_split(list(groups), [val_fraction, test_fraction], seed, where=where)
        split_of = np.zeros(len(records), dtype=np.int8)
        for p, indices in enumerate(parts):
            split_of[indices] = p
    else:
        split_of = fraction_split(len(records), val_fraction, test_fraction, seed, minimum=1)
    return {s: [r for r, p in zip(records, split_of) if p == i] for i, s in enumerate(SPLITS)}


def read_split_sources(cfg: Any, read: Callable[[str], list[Any]]) -> dict[str, list[Any]]:
    """The splits of a data config with ``source``, ``val_source``, ``test_source``, ``val_fraction``,
    ``test_fraction``, ``seed`` and ``group_column`` (records with a ``.group``): ``read(path)`` of the source cut by
    :func:`split_records` into the splits no file is given for; a given file is its split whole."""
    records = read(cfg.source)
    given = {"val": cfg.val_source, "test": cfg.test_source}
    out = split_records(
        records,
        0.0 if given["val"] else cfg.val_fraction,
        0.0 if given["test"] else cfg.test_fraction,
        cfg.seed,
        groups=None if cfg.group_column is None else [r.group for r in records],
        where=f"data.source={cfg.source}",
    )
    for split, path in given.items():
        if path:
            out[split] = read(path)
    return out
