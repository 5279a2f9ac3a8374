"""Splits by fraction, by label and by group: what mutation testing (tools/mutation.py) found no test covered."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnkit.data.splits import TEST, TRAIN, VAL, fraction_split, group_split, stratified_split


def _counts(split: np.ndarray) -> tuple[int, int, int]:
    return int((split == TRAIN).sum()), int((split == VAL).sum()), int((split == TEST).sum())


def test_fraction_split_counts_round_half_up() -> None:
    split = fraction_split(10, 0.2, 0.3, seed=0)
    assert split.dtype == np.int8 and split.shape == (10,)
    assert _counts(split) == (5, 2, 3)
    assert _counts(fraction_split(10, 0.25, 0.05, seed=0)) == (6, 3, 1)  # 2.5 -> 3 and 0.5 -> 1


def test_fraction_split_is_a_seeded_shuffle() -> None:
    a, b = fraction_split(50, 0.2, 0.2, seed=1), fraction_split(50, 0.2, 0.2, seed=1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, fraction_split(50, 0.2, 0.2, seed=2))
    assert not np.array_equal(np.sort(np.flatnonzero(a == VAL)), np.arange(10))  # not simply the first ids


def test_fraction_split_minimum_applies_to_non_zero_fractions_only() -> None:
    assert _counts(fraction_split(10, 0.0, 0.01, seed=0, minimum=2)) == (8, 0, 2)
    assert _counts(fraction_split(10, 0.01, 0.01, seed=0)) == (10, 0, 0)


def test_fraction_split_keeps_one_training_example() -> None:
    # [1, 1] held out of 2 leaves none to train on: the larger (the first of equals) gives one back
    assert _counts(fraction_split(2, 0.5, 0.5, seed=0)) == (1, 0, 1)
    assert _counts(fraction_split(1, 0.5, 0.5, seed=0)) == (1, 0, 0)
    assert _counts(fraction_split(3, 0.34, 0.6, seed=0)) == (1, 1, 1)


def test_stratified_split_holds_out_per_class() -> None:
    labels = [0] * 10 + [1] * 5 + [2]
    rest, (part_a, part_b) = stratified_split(labels, [0.2, 0.3], seed=0)
    by_class = lambda idx, y: sum(labels[i] == y for i in idx)  # noqa: E731
    assert [by_class(part_a, y) for y in (0, 1, 2)] == [2, 1, 0]
    assert [by_class(part_b, y) for y in (0, 1, 2)] == [3, 2, 0]  # 1.5 -> 2
    assert [by_class(rest, y) for y in (0, 1, 2)] == [5, 2, 1]  # the single example of class 2 stays
    assert rest == sorted(rest) and part_a == sorted(part_a) and part_b == sorted(part_b)
    assert sorted(rest + part_a + part_b) == list(range(len(labels)))


def test_stratified_split_is_seeded_and_shuffles() -> None:
    labels = [0, 1] * 20
    first = stratified_split(labels, [0.25], seed=3)
    assert first == stratified_split(labels, [0.25], seed=3)
    assert first != stratified_split(labels, [0.25], seed=4)
    held = first[1][0]
    assert len(held) == 10 and held != [i for i in range(40) if i < 10]


def test_stratified_split_keeps_one_of_each_class() -> None:
    rest, (held,) = stratified_split([0, 0, 1], [0.5], seed=0)
    assert len(held) == 1 and set(rest) | set(held) == {0, 1, 2}
    assert 2 in rest  # the single example of class 1


def test_group_split_of_nothing_is_empty_parts() -> None:
    parts = group_split([], [0.2, 0.1], seed=0)
    assert len(parts) == 3 and all(p.dtype == np.int64 and p.shape == (0,) for p in parts)


def test_group_split_of_one_group_with_nothing_held_out() -> None:
    rest, held = group_split(["a"], [0.0], seed=0)
    assert rest.tolist() == [0] and held.tolist() == []


def test_group_split_sizes_follow_the_fractions() -> None:
    for seed in range(5):
        parts = group_split(list(range(10)), [0.2], seed=seed)
        assert [len(p) for p in parts] == [8, 2]
        parts = group_split(list(range(10)), [0.3, 0.2], seed=seed)
        assert [len(p) for p in parts] == [5, 3, 2]


def test_group_split_stratifies_single_example_groups_exactly() -> None:
    labels = [0, 0, 0, 0, 1, 1, 1, 1]
    for seed in range(10):
        rest, held = group_split(list(range(8)), [0.5], seed=seed, stratify=labels)
        assert sorted(labels[i] for i in held) == [0, 0, 1, 1], seed
        assert sorted(labels[i] for i in rest) == [0, 0, 1, 1], seed


def test_group_split_messages() -> None:
    message = (
        "the data has 1 group(s): too few to hold out whole groups for 1 split(s) and keep one for training; "
        "give more groups, or set the held-out fractions to 0"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        group_split([7, 7], [0.2], seed=0)
    with pytest.raises(ValueError, match=re.escape("groups must be one value per example (1-D), got shape (2, 2)")):
        group_split(np.zeros((2, 2)), [0.2], seed=0)
