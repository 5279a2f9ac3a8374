"""Group-aware splits: whole groups per split, sizes near their fractions, classes stratified."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit.data.splits import TEST, VAL, fraction_split, group_split, split_records


def test_no_group_straddles_splits_and_every_index_is_used_once():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 300, 6000).astype(str)  # e.g. the source document of each passage
    labels = (rng.random(6000) < 0.3).astype(int)
    parts = group_split(groups, [0.1, 0.2], seed=1, stratify=labels)
    assert len(parts) == 3
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(6000))
    seen = [set(groups[p]) for p in parts]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not seen[i] & seen[j]
    for part, fraction in zip(parts, [0.7, 0.1, 0.2]):
        assert len(part) == pytest.approx(6000 * fraction, rel=0.05)
        assert labels[part].mean() == pytest.approx(0.3, abs=0.03)  # stratified


def test_stratification_beats_an_unstratified_split_on_skewed_groups():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(100), 20)
    labels = np.repeat(rng.random(100) < 0.2, 20).astype(int)  # a group's label is shared: hard to stratify
    strat = group_split(groups, [0.2], seed=0, stratify=labels)
    assert labels[strat[1]].mean() == pytest.approx(labels.mean(), abs=0.02)
    assert set(groups[strat[0]]).isdisjoint(groups[strat[1]])


def test_deterministic_in_the_seed():
    groups = np.arange(500) // 5
    a = group_split(groups, [0.2, 0.1], seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, group_split(groups, [0.2, 0.1], seed=3)))
    assert not np.array_equal(a[1], group_split(groups, [0.2, 0.1], seed=4)[1])


def test_few_groups_still_fill_every_held_out_part_or_say_why():
    parts = group_split(["a", "a", "a", "b", "c"], [0.1, 0.1], seed=0)  # fractions round to nothing
    assert [len(p) for p in parts] == [3, 1, 1] and list(parts[0]) == [0, 1, 2]
    with pytest.raises(ValueError, match="2 group"):
        group_split(["a", "b"], [0.2, 0.2], seed=0)
    assert [len(p) for p in group_split(["a", "b"], [0.0, 0.0], seed=0)] == [2, 0, 0]


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="sum to less than 1"):
        group_split([1, 2, 3], [0.5, 0.5], seed=0)
    with pytest.raises(ValueError, match="one label per example"):
        group_split([1, 2, 3], [0.2], seed=0, stratify=[0, 1])


def test_split_records_keeps_groups_whole_and_the_records_in_order() -> None:
    records = [f"r{i}" for i in range(60)]
    groups = [i // 3 for i in range(60)]  # 20 groups of 3
    parts = split_records(records, 0.2, 0.2, seed=1, groups=groups, where="data.source=x.jsonl")
    assert sorted(parts["train"] + parts["val"] + parts["test"]) == sorted(records)
    assert all(parts[s] for s in ("train", "val", "test"))
    seen = {s: {groups[records.index(r)] for r in parts[s]} for s in parts}
    assert not seen["train"] & seen["val"] and not seen["train"] & seen["test"] and not seen["val"] & seen["test"]
    for part in parts.values():
        assert part == sorted(part, key=records.index)  # in the file's order
    plain = split_records(records, 0.0, 0.0, seed=1)
    assert plain == {"train": records, "val": [], "test": []}
    assert len(split_records(["only"], 0.5, 0.4, seed=0)["train"]) == 1  # at least one training record


def test_fraction_split_holds_8_bytes_an_example_while_it_shuffles():
    """A corpus of millions of documents: the shuffle's order is an int64 array, not a list of Python ints (about
    36 bytes an example: +379 MB at 8.1 M documents), and the permutation is the same as a list's."""
    import random
    import tracemalloc

    n = 200_000
    tracemalloc.start()
    try:
        split = fraction_split(n, 0.1, 0.1, seed=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * n, f"{peak / n:.1f} bytes an example"
    order = list(range(1000))
    random.Random(3).shuffle(order)
    small = fraction_split(1000, 0.1, 0.1, seed=3)
    assert [i for i in order if small[i] == VAL] == order[:100] and int((split == TEST).sum()) == n // 10
