"""Every task under DDP (2 CPU processes, gloo): the shards the data modules give each process, the
gathering of decoded texts for corpus scores, and end-to-end runs (probed: two processes really ran)
whose test metrics equal a one-process `attnkit test` of the same checkpoint."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import probed_cli
import pytest
import torch
from cli_helpers import metrics_in_one_process

from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.reverse.config import ReverseDataConfig
from attnkit.data.reverse.module import ReverseDataModule
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.module import PairsDataModule
from attnkit.tasks.translate import corpus_scores
from attnkit.training.distributed import gather_lists
from cli_inprocess import cli_in_process

ONE_THREAD = ["trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu"]
TWO_PROCESSES = ["trainer.strategy=ddp", "trainer.devices=2"]
TINY = {
    "lm": [
        "data.builtin_documents=100", "model.d_model=32", "model.num_layers=1", "model.num_heads=2",
        "model.dim_feedforward=64", "model.max_len=32", "trainer.max_epochs=2", "trainer.batch_size=8", "optim.lr=5e-3",
    ],
    # Word-by-word pairs (the file _word_pairs writes): learnt in 12 short epochs, so that BLEU and exact
    # match are far from 0 (measured: BLEU 87, exact 0.8) and their equality with one process means something.
    "translate": [
        "model.d_model=32", "model.dim_feedforward=64", "model.num_layers=1", "trainer.max_epochs=12",
        "trainer.batch_size=8", "decode.beam_size=2", "optim.lr=5e-3", "optim.warmup=10",
    ],
}  # fmt: skip
COUNTED = ("test/acc", "test/exact")  # ratios of counts: equal exactly


def _attach(datamodule, world: int, rank: int, epoch: int = 0):
    """What the data module reads from the Trainer of a ``world``-process run."""
    datamodule.trainer = SimpleNamespace(world_size=world, global_rank=rank, current_epoch=epoch)
    return datamodule


def _batches(loader) -> list[list[int]]:
    return [list(b) for b in loader.batch_sampler]


def _word_pairs(path: Path) -> Path:
    """600 distinct English -> Spanish pairs of 1 to 4 number words, translated word by word."""
    english = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    spanish = ["uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve", "diez"]
    rng, pairs = random.Random(0), set()
    while len(pairs) < 600:
        words = [rng.randrange(10) for _ in range(rng.randint(1, 4))]
        pairs.add((" ".join(english[w] for w in words), " ".join(spanish[w] for w in words)))
    path.write_text("".join(f"{a}\t{b}\n" for a, b in sorted(pairs)))
    return path


def _train_two_processes(tmp_path: Path, task: str, *args: str, timeout: float = 300) -> list[dict[str, Any]]:
    """``attnkit train task *args`` on 2 processes, probed: it must have run as two processes (world size 2,
    ranks 0 and 1, two process ids), each training as many steps on batches of its own."""
    ranks = probed_cli.run(
        tmp_path / "probes", "ddp", "train", task, "--output_dir", str(tmp_path), "name=ddp",
        *ONE_THREAD, *TWO_PROCESSES, *args, world=2, timeout=timeout,
    )  # fmt: skip
    assert [(r["world_size"], r["global_rank"]) for r in ranks] == [(2, 0), (2, 1)], "not a 2-process run"
    assert len({r["pid"] for r in ranks}) == 2
    first, second = ([s[2] for s in r["steps"]] for r in ranks)
    assert first == second and first == list(range(len(first))) and first  # the same steps, in step
    assert [s[4] for s in ranks[0]["steps"]] != [s[4] for s in ranks[1]["steps"]]  # not the same batches
    return ranks


def _assert_test_metrics_match_one_process(run: Path) -> dict[str, float]:
    """The 2-process run's test metrics (metrics.json) against `attnkit test` in one process."""
    ddp = {k: v for k, v in json.loads((run / "metrics.json").read_text())["metrics"].items() if k.startswith("test/")}
    one = metrics_in_one_process(run)
    assert set(one) == set(ddp)
    for key, value in one.items():
        if key in COUNTED:
            assert ddp[key] == value, key
        else:
            assert ddp[key] == pytest.approx(value, abs=1e-6), key
    return ddp


# ---------------------------------------------------------------------------------------------- shards


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


def test_a_split_of_fewer_batches_than_processes_leaves_one_only_a_padding_batch():
    # EvalBatches' own tests: tests/data/test_samplers.py
    cfg = LMDataConfig(builtin_documents=30)
    mods = [_attach(LanguageModelDataModule(cfg, block=32, batch_size=64), 2, r) for r in (0, 1)]
    for mod in mods:
        mod.setup()
    size = len(mods[0].val_dataloader().dataset)
    assert 0 < size <= 64  # one batch
    assert [_batches(m.val_dataloader()) for m in mods] == [[list(range(size))], [[0]]]
    assert mods[1].val_dataloader().batch_sampler.is_padding(0)


HYPS = ["the cat sat on the mat", "uno dos tres", "a b c d e", "hola amigo", "veinte y tres mil"]
REFS = ["the cat sat on a mat", "uno dos tres cuatro", "a b c x e", "hola amigo", "veintitrés mil"]
# What each of 2 processes gathers and scores, as TranslateModule.on_test_epoch_end does; run per rank.
GATHER_AND_SCORE = """
import json, sys
import torch.distributed as dist
from attnkit.tasks.translate import corpus_scores
from attnkit.training.distributed import gather_lists
rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[5]
hyps, refs = json.loads(sys.argv[3]), json.loads(sys.argv[4])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
all_hyps, all_refs = gather_lists(hyps), gather_lists(refs)
result = {"world_size": dist.get_world_size(), "hyps": all_hyps, "refs": all_refs,
          "scores": corpus_scores(all_hyps, all_refs)}
dist.destroy_process_group()
with open(out, "w") as f:
    json.dump(result, f)
"""


def test_gather_lists_outside_a_process_group_is_the_list_itself():
    items = ["uno", "dos"]
    gathered = gather_lists(items)
    assert gathered == items and gathered is not items


def test_corpus_scores_come_from_the_whole_corpus_gathered_from_both_processes(tmp_path: Path):
    import sacrebleu

    halves = [(HYPS[:3], REFS[:3]), (HYPS[3:], REFS[3:])]  # what each of 2 processes decoded
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for rank, (hyps, refs) in enumerate(halves):
        out = tmp_path / f"rank{rank}.json"
        cmd = [sys.executable, "-c", GATHER_AND_SCORE, str(rank), str(tmp_path / "store"), json.dumps(hyps)]
        cmd += [json.dumps(refs), str(out)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    try:
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for result in ranks:  # every process has every translation, rank 0's first, and the same scores
        assert result["world_size"] == 2
        assert (result["hyps"], result["refs"]) == (HYPS, REFS)
        assert result["scores"] == ranks[0]["scores"]
    gathered = ranks[0]["scores"]
    assert gathered["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert gathered["chrf"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert gathered["exact"] == 1 / 5
    per_process = [corpus_scores(h, r)["bleu"] for h, r in halves]
    assert abs(sum(per_process) / 2 - gathered["bleu"]) > 1  # what averaging per-process scores reported


# ---------------------------------------------------------------------------------------------- runs


# translate (corpus scores gathered from both processes) and lm (perplexity from summed losses and tokens); the
# evaluation of every task, anomaly and classify included, on two processes with uneven splits equals one process
# in tests/training/test_fsdp_eval.py, through the same code (EvalBatches, the metrics' reduction)
@pytest.mark.parametrize("task", sorted(TINY))
def test_two_process_run_equals_one_process_test(tmp_path: Path, task: str):
    data = [f"data.source={_word_pairs(tmp_path / 'pairs.tsv')}"] if task == "translate" else []
    _train_two_processes(tmp_path, task, *TINY[task], *data)
    metrics = _assert_test_metrics_match_one_process(tmp_path / task / "ddp")
    assert {"test/acc", "test/loss"} <= set(metrics)
    if task == "translate":  # learnt: the equal corpus scores are not both 0
        assert metrics["test/bleu"] > 50 and metrics["test/chrf"] > 50 and metrics["test/exact"] > 0.5, metrics
    if task == "lm":
        assert {"test/ppl", "test/bpc"} <= set(metrics)


def test_reverse_learns_under_ddp_as_in_one_process(tmp_path: Path):
    common = [
        "data.train_size=4000", "data.seq_len=8", "data.val_size=256", "data.test_size=512",
        "trainer.batch_size=32", "optim.lr=2e-3", *ONE_THREAD,
    ]  # fmt: skip
    [one_process] = probed_cli.run(
        tmp_path / "probes", "one", "train", "reverse", "--output_dir", str(tmp_path), "name=one",
        "trainer.max_epochs=4", *common,
    )  # fmt: skip
    assert one_process["world_size"] == 1 and len(one_process["steps"]) == 4 * 4000 // 32
    # Each of the 2 processes sees half the data per epoch: twice the epochs for the same number of samples.
    ranks = _train_two_processes(tmp_path, "reverse", "trainer.max_epochs=8", *common, timeout=540)
    assert [len(r["steps"]) for r in ranks] == [8 * -(-4000 // 2 // 32)] * 2  # 2,000 examples each: 63 batches
    one = json.loads((tmp_path / "reverse" / "one" / "metrics.json").read_text())["metrics"]
    ddp = _assert_test_metrics_match_one_process(tmp_path / "reverse" / "ddp")
    assert one["test/acc"] >= 0.98
    assert ddp["test/acc"] >= 0.98
    assert abs(one["test/acc"] - ddp["test/acc"]) <= 0.02
    bad = cli_in_process("test", str(tmp_path / "reverse" / "ddp"), "data.seq_len=4")
    assert bad.returncode == 2 and "trainer.* overrides only (got data)" in bad.stderr
