"""Every task under DDP (2 CPU processes, gloo): the shards the data modules give each process, and
end-to-end runs whose test metrics equal a one-process `attnkit test` of the same checkpoint."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import run_cli

from attnkit.data.base import EvalBatches
from attnkit.data.lm import LanguageModelDataModule, LMDataConfig
from attnkit.data.pairs import PairsDataConfig, PairsDataModule
from attnkit.data.synthetic import ReverseDataConfig, ReverseDataModule
from attnkit.tasks.translate import corpus_scores

ONE_THREAD = ["trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu"]
TWO_PROCESSES = ["trainer.strategy=ddp", "trainer.devices=2"]
TINY = {
    "anomaly": [
        "data.train_sets=256", "data.val_sets=64", "data.test_sets=96", "model.d_model=32",
        "model.dim_feedforward=64", "model.num_layers=1", "trainer.max_epochs=2", "trainer.batch_size=32",
    ],
    "classify": [
        "data.synthetic_size=400", "data.max_len=32", "data.min_freq=1", "model.d_model=32",
        "model.dim_feedforward=64", "model.num_layers=1", "trainer.max_epochs=2", "trainer.batch_size=16",
    ],
    "lm": [
        "data.builtin_documents=100", "model.d_model=32", "model.num_layers=1", "model.num_heads=2",
        "model.dim_feedforward=64", "model.max_len=32", "trainer.max_epochs=2", "trainer.batch_size=8", "optim.lr=5e-3",
    ],
    "translate": [
        "data.num_pairs=400", "model.d_model=32", "model.dim_feedforward=64", "model.num_layers=1",
        "trainer.max_epochs=2", "trainer.batch_size=16", "decode.beam_size=2",
    ],
}  # fmt: skip
COUNTED = ("test/acc", "test/exact")  # ratios of counts: equal exactly


def _attach(datamodule, world: int, rank: int, epoch: int = 0):
    """What the data module reads from the Trainer of a ``world``-process run."""
    datamodule.trainer = SimpleNamespace(world_size=world, global_rank=rank, current_epoch=epoch)
    return datamodule


def _batches(loader) -> list[list[int]]:
    return [list(b) for b in loader.batch_sampler]


def _assert_test_metrics_match_one_process(run: Path) -> dict[str, float]:
    """The 2-process run's test metrics (metrics.json) against `attnkit test` in one process."""
    ddp = {k: v for k, v in json.loads((run / "metrics.json").read_text())["metrics"].items() if k.startswith("test/")}
    out = run_cli("test", str(run), "trainer.devices=1", "trainer.strategy=auto", "--json").stdout
    one = json.loads(out.strip().splitlines()[-1])
    assert set(one) == set(ddp)
    for key, value in one.items():
        if key in COUNTED:
            assert ddp[key] == value, key
        else:
            assert ddp[key] == pytest.approx(value, abs=1e-6), key
    return ddp


# ---------------------------------------------------------------------------------------------- shards


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("size", [7, 64, 100])
def test_eval_batches_are_the_one_process_batches_each_once(world: int, size: int):
    one = list(EvalBatches(size, 8, 1, 0))
    assert one == [list(range(s, min(s + 8, size))) for s in range(0, size, 8)]
    if -(-size // 8) < world:
        with pytest.raises(ValueError, match=f"fewer than the {world} processes.*lower trainer.batch_size"):
            EvalBatches(size, 8, world, 0, "test")
        return
    ranks = [EvalBatches(size, 8, world, r) for r in range(world)]
    assert sorted(b for r in ranks for b in r) == one  # every example once, in its one-process batch
    assert [len(list(r)) for r in ranks] == [len(r) for r in ranks]
    assert max(len(r) for r in ranks) - min(len(r) for r in ranks) <= 1


def test_split_loaders_shard_training_disjointly_and_evaluation_exactly():
    cfg = ReverseDataConfig(seq_len=4, train_size=101, val_size=30, test_size=45)
    mods = [_attach(ReverseDataModule(cfg, batch_size=8), 2, r) for r in (0, 1)]
    train = [m.train_dataloader() for m in mods]
    for loader in train:
        loader.sampler.set_epoch(3)  # what Lightning does at every epoch start
    shards = [list(loader.sampler) for loader in train]
    assert len(shards[0]) == len(shards[1]) == 50 and not set(shards[0]) & set(shards[1])
    assert len(train[0]) == len(train[1]) == 7  # as many batches on each process: none waits
    again = _attach(ReverseDataModule(cfg, batch_size=8), 2, 0).train_dataloader()
    again.sampler.set_epoch(3)
    assert list(again.sampler) == shards[0]  # seeded
    again.sampler.set_epoch(4)
    assert list(again.sampler) != shards[0]  # reshuffled per epoch
    one = ReverseDataModule(cfg, batch_size=8)
    one.setup()
    assert sorted(_batches(mods[0].test_dataloader()) + _batches(mods[1].test_dataloader())) == [
        list(range(s, min(s + 8, 45))) for s in range(0, 45, 8)
    ]
    x0, _ = next(iter(mods[1].test_dataloader()))
    assert torch.equal(x0, one.splits["test"].tensors[0][8:16])  # rank 1 starts with batch 1


def test_length_bucketed_batches_are_distribution_aware():
    cfg = PairsDataConfig(num_pairs=300, val_fraction=0.1, test_fraction=0.1)
    mods = [_attach(PairsDataModule(cfg, batch_size=8), 2, r) for r in (0, 1)]
    for m in mods:
        m.setup()
    loaders = [m.train_dataloader() for m in mods]
    whole = _attach(PairsDataModule(cfg, batch_size=8), 1, 0)
    whole.setup()
    one = whole.train_dataloader().batch_sampler
    for epoch in (0, 1):
        for sampler in (one, *(loader.batch_sampler for loader in loaders)):
            sampler.set_epoch(epoch)  # what Lightning does at every epoch start
        all_batches = list(one)
        parts = [_batches(loader) for loader in loaders]
        assert len(parts[0]) == len(parts[1]) == len(loaders[0]) == len(all_batches) // 2
        assert parts[0] == all_batches[0::2][: len(parts[0])] and parts[1] == all_batches[1::2][: len(parts[1])]
        assert not {i for b in parts[0] for i in b} & {i for b in parts[1] for i in b}
    loaders[0].batch_sampler.set_epoch(0)
    first = _batches(loaders[0])
    loaders[0].batch_sampler.set_epoch(1)
    assert _batches(loaders[0]) != first  # set_epoch honoured


def test_too_small_splits_for_the_processes_are_a_clear_error():
    cfg = LMDataConfig(builtin_documents=30)
    mod = _attach(LanguageModelDataModule(cfg, block=32, batch_size=64), 2, 0)
    mod.setup()
    with pytest.raises(ValueError, match=r"the val split has \d+ examples.*fewer than the 2 processes"):
        mod.val_dataloader()


def test_corpus_scores_come_from_the_whole_corpus_not_per_process_means():
    import sacrebleu

    hyps = ["the cat sat on the mat", "uno dos tres", "a b c d e", "hola", "veinte y tres mil"]
    refs = ["the cat sat on a mat", "uno dos tres cuatro", "a b c x e", "hola amigo", "veintitrés mil"]
    # what each of 2 processes decodes; the module gathers both before scoring (gather_lists)
    halves = [(hyps[:3], refs[:3]), (hyps[3:], refs[3:])]
    gathered = corpus_scores([h for part, _ in halves for h in part], [r for _, part in halves for r in part])
    assert gathered["bleu"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert gathered["chrf"] == sacrebleu.corpus_chrf(hyps, [refs]).score
    per_process = [corpus_scores(h, r)["bleu"] for h, r in halves]
    assert abs(sum(per_process) / 2 - gathered["bleu"]) > 1  # what averaging per-process scores reported


# ---------------------------------------------------------------------------------------------- runs


@pytest.mark.parametrize("task", sorted(TINY))
def test_two_process_run_equals_one_process_test(tmp_path: Path, task: str):
    run_cli("train", task, "--output_dir", str(tmp_path), "name=ddp", *ONE_THREAD, *TWO_PROCESSES, *TINY[task])
    metrics = _assert_test_metrics_match_one_process(tmp_path / task / "ddp")
    assert {"test/acc", "test/loss"} <= set(metrics)
    if task == "translate":
        assert {"test/bleu", "test/chrf", "test/exact"} <= set(metrics) and metrics["test/chrf"] > 0
    if task == "lm":
        assert {"test/ppl", "test/bpc"} <= set(metrics)


def test_reverse_learns_under_ddp_as_in_one_process(tmp_path: Path):
    common = [
        "data.train_size=4000", "data.seq_len=8", "data.val_size=256", "data.test_size=512",
        "trainer.batch_size=32", "optim.lr=2e-3", *ONE_THREAD,
    ]  # fmt: skip
    run_cli("train", "reverse", "--output_dir", str(tmp_path), "name=one", "trainer.max_epochs=4", *common)
    # Each of the 2 processes sees half the data per epoch: twice the epochs for the same number of samples.
    run_cli("train", "reverse", "--output_dir", str(tmp_path), "name=ddp", "trainer.max_epochs=8",
            *TWO_PROCESSES, *common, timeout=540)  # fmt: skip
    one = json.loads((tmp_path / "reverse" / "one" / "metrics.json").read_text())["metrics"]
    ddp = _assert_test_metrics_match_one_process(tmp_path / "reverse" / "ddp")
    assert one["test/acc"] >= 0.98
    assert ddp["test/acc"] >= 0.98
    assert abs(one["test/acc"] - ddp["test/acc"]) <= 0.02
    bad = run_cli("test", str(tmp_path / "reverse" / "ddp"), "data.seq_len=4", check=False)
    assert bad.returncode == 2 and "trainer.* overrides only (got data)" in bad.stderr
