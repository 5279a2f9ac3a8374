"""Evaluation under FSDP (2 CPU processes, gloo, one thread each) when a split does not divide evenly over the
processes, and SIGTERM ending a sharded run whose processes are stuck in a collective.

Under FSDP every forward pass is a collective (each block's weights are all-gathered from every process), so
every process must run as many evaluation batches: ``EvalBatches`` gives a process whose share ran out a
padding batch, which the task modules run and count in no metric. The runs are probed (eval_probed.py):
each process's validation and test batches, whether each was padding, and whether the model was sharded.
With the old round-robin batches (one batch more on rank 0) these runs never ended, or ended with the
processes' collectives paired wrongly and metrics that were not the split's."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import eval_probed
import probed_cli
import pytest
from cli_helpers import metrics_in_one_process
from test_ddp import _word_pairs

from chat_models import build_chat_model

COMMON = [
    "trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu",
    "trainer.strategy=fsdp", "trainer.devices=2", "trainer.deterministic=true", "trainer.max_epochs=1",
]  # fmt: skip
SMALL = ["model.d_model=32", "model.dim_feedforward=64", "model.num_layers=2"]
# Splits of an odd number of batches (3 or 5: one process gets one batch more), and reverse's test split of one
# batch (one process gets only a padding batch). The data of test_ddp.py's runs, other batch sizes.
TASKS: dict[str, list[str]] = {
    "reverse": [*SMALL, "data.train_size=256", "data.val_size=80", "data.test_size=20", "data.seq_len=8",
                "trainer.batch_size=32", "model.num_heads=1"],
    "anomaly": [*SMALL, "data.train_sets=128", "data.val_sets=72", "data.test_sets=96", "trainer.batch_size=32"],
    "classify": [*SMALL, "data.synthetic_size=400", "data.max_len=32", "data.min_freq=1", "trainer.batch_size=16"],
    "lm": [*SMALL, "data.builtin_documents=100", "model.num_heads=2", "model.max_len=32", "trainer.batch_size=6"],
    # Learnt in a few epochs (BLEU and exact match far from 0): a padding translation counted would show.
    "translate": [*SMALL, "model.num_layers=1", "model.num_decoder_layers=2", "trainer.max_epochs=10",
                  "trainer.batch_size=12", "decode.beam_size=2", "optim.lr=5e-3", "optim.warmup=10"],
    "sft": ["model.lora=null", "trainer.batch_size=8", "optim.lr=2e-2", "optim.warmup=4"],
}  # fmt: skip
COUNTED = ("test/acc", "test/exact")  # ratios of counts: equal exactly


def _conversations(folder: Path) -> list[str]:
    """sft's data: a tiny Llama (tests/chat_models.py) and conversations, 20 per evaluation split (3 batches)."""
    base = build_chat_model(folder / "base", context=128)
    rng = random.Random(0)
    words = ["owl", "cat", "fox", "dog", "moon", "river"]
    paths = {}
    for name, size in {"train": 32, "val": 20, "test": 20}.items():
        lines = []
        for _ in range(size):
            said = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
            messages = [{"role": "user", "content": f"Repeat: {said}"}, {"role": "assistant", "content": said}]
            lines.append(json.dumps({"messages": messages}) + "\n")
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(lines))
    return [f"model.init={base}", f"data.source={paths['train']}", f"data.val_source={paths['val']}",
            f"data.test_source={paths['test']}"]  # fmt: skip


def _data(task: str, folder: Path) -> list[str]:
    if task == "translate":
        return [f"data.source={_word_pairs(folder / 'pairs.tsv')}"]
    if task == "sft":
        return _conversations(folder)
    return []


def _passes(batches: list[list[Any]]) -> list[list[list[Any]]]:
    """``batches`` cut into passes over the split (each starts at batch 0)."""
    passes: list[list[list[Any]]] = []
    for batch in batches:
        if batch[1] == 0:
            passes.append([])
        passes[-1].append(batch)
    return passes


def _assert_as_many_batches_each_counted_once(records: list[dict[str, Any]], stage: str) -> int:
    """In every pass over ``stage`` (validation: after each epoch and at the end), both processes ran as many
    batches, the model sharded, the first process none of padding, the second its padding last; returns the
    number of batches counted in a pass (the split's)."""
    passes = [_passes([b for b in r["eval"] if b[0] == stage]) for r in records]
    assert passes[0] and len(passes[0]) == len(passes[1]), f"{stage}: {len(passes[0])} and {len(passes[1])} passes"
    totals = set()
    for first, second in zip(*passes):
        assert len(first) == len(second), f"{stage}: {len(first)} and {len(second)} batches"
        assert all(b[3] for b in first + second), f"{stage}: the model was not sharded"
        assert [b[1] for b in first] == [b[1] for b in second] == list(range(len(first)))
        assert not any(b[2] for b in first)  # the first process gets batch 0, 2, ...: never a padding batch
        counted = sum(not b[2] for b in second)
        assert [b[2] for b in second] == [False] * counted + [True] * (len(second) - counted)  # padding last
        totals.add(len(first) + counted)
    assert len(totals) == 1, totals
    return totals.pop()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_fsdp_evaluates_an_uneven_split_as_one_process(tmp_path: Path, task: str):
    args = ["train", task, "--output_dir", str(tmp_path), "name=fsdp", *COMMON, *TASKS[task], *_data(task, tmp_path)]
    records = eval_probed.run(tmp_path / "probes", "fsdp", *args, world=2, timeout=400)
    assert [(r["world_size"], r["global_rank"]) for r in records] == [(2, 0), (2, 1)], "not a 2-process run"
    for stage in ("val", "test"):
        batches = _assert_as_many_batches_each_counted_once(records, stage)
        assert batches % 2 == 1, f"{stage}: {batches} batches divide evenly over 2 processes: not what is tested"

    run = tmp_path / task / "fsdp"
    fsdp = {k: v for k, v in json.loads((run / "metrics.json").read_text())["metrics"].items() if k.startswith("test/")}
    one = metrics_in_one_process(run)  # the same checkpoint, one process: every example once
    assert set(one) == set(fsdp) and {"test/loss"} <= set(one)
    for key, value in one.items():
        if key in COUNTED:
            assert fsdp[key] == value, key
        else:
            assert fsdp[key] == pytest.approx(value, abs=1e-6), key
    if task == "translate":  # learnt: a padding translation counted would change them
        assert fsdp["test/exact"] > 0.2 and fsdp["test/bleu"] > 20, fsdp


# ---------------------------------------------------------------------------------------------- SIGTERM

STUCK_BOUND_S = 60.0  # the watchdog's 10 s, once per process, and the processes' ends, on a busy machine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").is_file() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize(
    ("stuck_in", "stuck_at", "extra", "says"),
    [  # 4 training steps an epoch; last.ckpt: every 2 steps, or at the end of the first epoch
        ("train", 3, ["trainer.checkpoint_every_n_steps=2"], "last.ckpt holds its last checkpoint"),
        ("train", 2, ["trainer.checkpoint_every_n_steps=null"], "No checkpoint had been written"),
        ("test", 0, [], "last.ckpt holds its last checkpoint"),  # the end of a run: where the hung
    ],
)
def test_sigterm_ends_a_sharded_run_stuck_in_a_collective(
    tmp_path: Path, stuck_in: str, stuck_at: int, extra: list[str], says: str
):
    probes = tmp_path / "probes"
    args = ["train", "reverse", "--output_dir", str(tmp_path), "name=stuck", *COMMON, *TASKS["reverse"], *extra]
    proc = eval_probed.start(probes, "stuck", *args, stuck_at=stuck_at, stuck_in=stuck_in)
    marks = [probes / f"stuck-rank{r}-stuck" for r in (0, 1)]
    pids: list[int] = []
    try:
        probed_cli.wait_for(marks, proc)
        pids = [int(m.read_text()) for m in marks]
        time.sleep(1.0)  # both are inside the receive
        assert proc.poll() is None and all(_alive(p) for p in pids)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to the command the user started: global rank 0
        try:
            out, err = proc.communicate(timeout=STUCK_BOUND_S)
        except Exception:
            raise AssertionError(f"SIGTERM did not end the stuck run within {STUCK_BOUND_S} s") from None
        while any(_alive(p) for p in pids) and time.monotonic() - sent < STUCK_BOUND_S:
            time.sleep(0.05)
        took = time.monotonic() - sent
        assert not any(_alive(p) for p in pids), f"a process of the run outlived SIGTERM by {STUCK_BOUND_S} s"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, f"{proc.returncode}\n{out}\n{err}"
    assert "SIGTERM received, but its main thread did not answer it within 10 s: it is stuck" in err, err
    assert says in err, err
    assert took < STUCK_BOUND_S
