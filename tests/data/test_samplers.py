"""ShuffledOrder: torchdata's RandomSampler's order and state, without a Python list of every index; EvalBatches:
every process of a multi-process run as many evaluation batches, every example once."""

from __future__ import annotations

import tracemalloc

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from attnkit.data.base import EvalBatches
from attnkit.data.samplers import CHUNK, LengthGroupedBatches, ShuffledOrder
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.module import PairsDataModule


def _epochs(sampler, n: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [list(sampler) for _ in range(n)]


@pytest.mark.parametrize("size", [0, 1, 7, CHUNK - 1, CHUNK, 3 * CHUNK + 5])
def test_the_same_order_as_torchdata_for_the_same_seed(size: int) -> None:
    data = range(size)
    ours = _epochs(ShuffledOrder(data, torch.Generator().manual_seed(3)), 3)
    theirs = _epochs(RandomSampler(data, generator=torch.Generator().manual_seed(3)) if size else [], 3)
    if size:
        assert ours == theirs
        assert all(sorted(epoch) == list(data) for epoch in ours)
        assert size < 2 or ours[0] != ours[1]  # each epoch draws a new order
    else:
        assert ours == [[], [], []]


@pytest.mark.parametrize("stop", [0, 1, CHUNK - 1, CHUNK, CHUNK + 3, 2 * CHUNK + 9])
@pytest.mark.parametrize("resume_with", ["ours", "torchdata"])
def test_a_saved_position_resumes_the_same_epoch(stop: int, resume_with: str) -> None:
    """The state saved mid-epoch (in the second epoch) gives the rest of that epoch, then the next
    epochs as an uninterrupted sampler would; the state is torchdata's, so either side reads it."""
    data = range(2 * CHUNK + 10)
    full = _epochs(ShuffledOrder(data, torch.Generator().manual_seed(5)), 3)
    sampler = ShuffledOrder(data, torch.Generator().manual_seed(5))
    list(sampler)  # epoch 0
    it = iter(sampler)
    head = [next(it) for _ in range(stop)]
    state = it.state_dict()
    assert state["yielded"] == stop

    fresh = torch.Generator().manual_seed(999)  # a new process: its generator knows nothing
    other = ShuffledOrder(data, fresh) if resume_with == "ours" else RandomSampler(data, generator=fresh)
    resumed = iter(other)
    resumed.load_state_dict(state)
    assert head + list(resumed) == full[1]
    assert list(other) == full[2]


def test_it_reads_a_position_torchdata_saved() -> None:
    data = range(100)
    theirs = iter(RandomSampler(data, generator=torch.Generator().manual_seed(1)))
    head = [next(theirs) for _ in range(40)]
    sampler = ShuffledOrder(data, torch.Generator())
    it = iter(sampler)
    it.load_state_dict(theirs.state_dict())
    assert head + list(it) == list(ShuffledOrder(data, torch.Generator().manual_seed(1)))


def test_a_position_beyond_the_data_is_refused() -> None:
    it = iter(ShuffledOrder(range(10), torch.Generator().manual_seed(0)))
    state = {"yielded": 11, "generator": torch.Generator().manual_seed(0).get_state()}
    with pytest.raises(ValueError, match="11 of 10 examples: not this data"):
        it.load_state_dict(state)


def test_no_python_list_of_every_index() -> None:
    """Starting an epoch of 2 M examples allocates a chunk of Python ints, not 2 M of them (torchdata's
    sampler allocates ~70 MB of them here)."""
    data = range(2_000_000)
    tracemalloc.start()
    try:
        first = next(iter(ShuffledOrder(data, torch.Generator().manual_seed(0))))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0 <= first < len(data)
    assert peak < 4 * CHUNK * 40, f"{peak / 1e6:.1f} MB of Python objects to start one epoch"


def test_a_stateful_loader_resumes_mid_epoch_with_the_same_batches() -> None:
    data = list(range(50))
    loader = StatefulDataLoader(data, batch_size=4, sampler=ShuffledOrder(data, torch.Generator().manual_seed(2)))
    expected = [b.tolist() for _ in range(2) for b in loader]
    loader = StatefulDataLoader(data, batch_size=4, sampler=ShuffledOrder(data, torch.Generator().manual_seed(2)))
    seen = [b.tolist() for b in loader]
    it = iter(loader)
    seen += [next(it).tolist() for _ in range(5)]
    state = loader.state_dict()
    again = StatefulDataLoader(data, batch_size=4, sampler=ShuffledOrder(data, torch.Generator().manual_seed(77)))
    again.load_state_dict(state)
    seen += [b.tolist() for b in again]
    assert seen == expected


# ---------------------------------------------------------------------------------------------- EvalBatches


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize(("size", "batch_size"), [(0, 8), (1, 8), (7, 8), (8, 8), (20, 8), (24, 8), (64, 8), (100, 8)])
def test_eval_batches_as_many_on_every_process_each_example_once(world: int, size: int, batch_size: int) -> None:
    one = list(EvalBatches(size, batch_size, 1, 0))
    assert one == [list(range(s, min(s + batch_size, size))) for s in range(0, size, batch_size)]
    ranks = [EvalBatches(size, batch_size, world, r, "test") for r in range(world)]
    dealt = [list(r) for r in ranks]
    per_process = -(-len(one) // world)  # ceil
    assert [len(d) for d in dealt] == [len(r) for r in ranks] == [per_process] * world  # none waits for another
    real = [[b for i, b in enumerate(d) if not ranks[r].is_padding(i)] for r, d in enumerate(dealt)]
    assert sorted(b for r in real for b in r) == one  # every example once, in its one-process batch
    for r, d in enumerate(real):
        assert d == one[r::world]  # dealt round robin, in order
    for r, d in enumerate(dealt):
        padding = [i for i in range(len(d)) if ranks[r].is_padding(i)]
        assert padding == list(range(len(real[r]), per_process))  # after its own batches, marked
        assert all(d[i] == [0] for i in padding)  # one example: cheap, and the same collectives as any batch
        assert not ranks[r].is_padding(per_process) and not ranks[r].is_padding(-1)  # beyond its batches
    assert world > 1 or not any(r.is_padding(i) for r in ranks for i in range(per_process))  # never alone
    assert sum(len(d) - len(r) for d, r in zip(dealt, real)) == per_process * world - len(one)


def test_eval_batches_in_a_loader_give_the_padding_example() -> None:
    data = list(range(10, 30))  # 20 examples: batches of 8, 8, 4 over 2 processes
    loaders = [StatefulDataLoader(data, batch_sampler=EvalBatches(len(data), 8, 2, r)) for r in (0, 1)]
    assert [[b.tolist() for b in loader] for loader in loaders] == [
        [list(range(10, 18)), list(range(26, 30))],
        [list(range(18, 26)), [10]],
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 4, 2, 2), r"rank 2 out of range for 2 processes"),
        ((10, 4, 2, -1), r"rank -1 out of range"),
        ((10, 4, 0, 0), r"rank 0 out of range for 0 processes"),
        ((10, 0, 2, 0), r"the test split's batches need a size >= 0 and a batch size >= 1, got 10 and 0"),
        ((-1, 4, 2, 0), r"got -1 and 4"),
    ],
)
def test_eval_batches_refuse_what_cannot_be_dealt(args: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EvalBatches(*args, split="test")


def test_length_grouped_batches_refuse_fewer_batches_than_processes_and_a_bad_rank() -> None:
    with pytest.raises(ValueError, match=r"has 9 rows, fewer batches of trainer.batch_size=8 than the 3 processes"):
        LengthGroupedBatches([1] * 9, batch_size=8, seed=0, num_replicas=3, rank=0)
    with pytest.raises(ValueError, match="rank 2 out of range for 2 processes"):
        LengthGroupedBatches([1] * 64, batch_size=8, seed=0, num_replicas=2, rank=2)
    assert len(LengthGroupedBatches([1] * 17, batch_size=8, seed=0, num_replicas=3, rank=2)) == 1  # 3 batches: 1 each


def test_translate_training_batches_resume_mid_epoch_from_the_loader_state() -> None:
    """translate's length-bucketed loader is stateful: a loader restored from the state after 3 batches gives the
    epoch's remaining batches (the run resumed mid-epoch sees what the uninterrupted run saw)."""
    cfg = PairsDataConfig(num_pairs=300, val_fraction=0.1, test_fraction=0.1)
    dm = PairsDataModule(cfg, batch_size=8)
    dm.setup()
    loader = dm.train_dataloader()
    assert isinstance(loader.batch_sampler, LengthGroupedBatches)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    rest = [batch[0].tolist() for batch in it]
    again = dm.train_dataloader()
    again.load_state_dict(state)
    assert [batch[0].tolist() for batch in again] == rest and rest


def test_shuffled_order_made_anew_for_a_later_epoch_draws_that_epochs_order() -> None:
    """Epoch e's order is the generator's e-th draw, also from a sampler made anew at epoch e (a run resumed from
    an epoch-end checkpoint: Lightning restores no loader state, makes the iterator, then calls set_epoch)."""
    data = list(range(50))
    reference = torch.Generator().manual_seed(4)
    draws = [torch.randperm(50, generator=reference).tolist() for _ in range(3)]
    whole = ShuffledOrder(data, torch.Generator().manual_seed(4))
    epochs = []
    for epoch in range(3):
        it = iter(whole)  # Lightning's order: the iterator first, then set_epoch
        whole.set_epoch(epoch)
        epochs.append(list(it))
    assert epochs == draws  # the orders of an uninterrupted run: unchanged
    for epoch in (1, 2):
        again = ShuffledOrder(data, torch.Generator().manual_seed(4))
        it = iter(again)
        again.set_epoch(epoch)
        assert list(it) == draws[epoch], epoch


def test_shuffled_order_restored_mid_epoch_goes_on_with_the_next_epochs_order() -> None:
    data = list(range(40))
    whole = StatefulDataLoader(data, batch_size=10, sampler=ShuffledOrder(data, torch.Generator().manual_seed(5)))
    epochs = []
    for epoch in range(3):
        it = iter(whole)
        whole.sampler.set_epoch(epoch)
        epochs.append([b.tolist() for b in it])
    resumed = StatefulDataLoader(data, batch_size=10, sampler=ShuffledOrder(data, torch.Generator().manual_seed(5)))
    first = StatefulDataLoader(data, batch_size=10, sampler=ShuffledOrder(data, torch.Generator().manual_seed(5)))
    it = iter(first)
    first.sampler.set_epoch(0)
    next(it)
    it = iter(first)  # epoch 1, stopped after 2 batches
    first.sampler.set_epoch(1)
    got = [next(it).tolist(), next(it).tolist()]
    state = first.state_dict()
    resumed.load_state_dict(state)
    it = iter(resumed)
    resumed.sampler.set_epoch(1)  # what Lightning does after restoring
    assert got + [b.tolist() for b in it] == epochs[1]
    it = iter(resumed)
    resumed.sampler.set_epoch(2)
    assert [b.tolist() for b in it] == epochs[2]
