"""``attnkit train sft`` under DDP (2 CPU processes, gloo, 1 thread each) and stopped by SIGTERM then resumed,
probed (probed_cli.py): what each process really ran. Conversations of lengths varying ~10x, so that the
length-bucketed batches differ in width; LoRA (the default) on the tiny ChatML Llama of tests/chat_models.py."""

from __future__ import annotations

import json
import random
import shlex
import signal
from pathlib import Path

import probed_cli
import pytest
import torch
from cli_helpers import metrics_in_one_process

from attnkit.training.checkpoint import load_checkpoint_file
from chat_models import build_chat_model

WORDS = ["owl", "cat", "fox", "dog", "moon", "river", "stars", "hill"]
COMMON = [
    "trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu",
    "trainer.deterministic=true", "trainer.batch_size=8", "optim.lr=2e-2", "optim.warmup=4", "seed=0",
]  # fmt: skip
TRAIN = 96  # conversations: 12 length-bucketed batches of 8 per epoch in one process, 6 per process under DDP


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The base model and a train/val/test set of conversations repeating 1 to 10 words (lengths vary ~10x)."""
    folder = tmp_path_factory.mktemp("sft_ddp")
    base = build_chat_model(folder / "base", context=128)
    rng = random.Random(0)

    def line() -> str:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10)))
        messages = [{"role": "user", "content": f"Repeat: {words}"}, {"role": "assistant", "content": words}]
        return json.dumps({"messages": messages})

    paths = {}
    for name, size in {"train": TRAIN, "val": 16, "test": 16}.items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(line() + "\n" for _ in range(size)))
    return [f"model.init={base}", f"data.source={paths['train']}", f"data.val_source={paths['val']}",
            f"data.test_source={paths['test']}", *COMMON]  # fmt: skip


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run / "checkpoints" / "last.ckpt")["state_dict"]


def test_sft_trains_under_ddp_on_two_processes_each_its_own_batches(setup: list[str], tmp_path: Path) -> None:
    args = ["train", "sft", "--output_dir", str(tmp_path), "name=ddp", *setup, "trainer.max_epochs=2"]
    ranks = probed_cli.run(tmp_path / "probes", "ddp", *args, "trainer.strategy=ddp", "trainer.devices=2", world=2)
    assert [(r["world_size"], r["global_rank"]) for r in ranks] == [(2, 0), (2, 1)], "not a 2-process run"
    assert len({r["pid"] for r in ranks}) == 2
    first, second = ([s[2] for s in r["steps"]] for r in ranks)
    assert first == second == list(range(2 * TRAIN // 8 // 2))  # half the one-process steps each, in step
    assert {s[4] for s in ranks[0]["steps"]}.isdisjoint(s[4] for s in ranks[1]["steps"])  # each its own batches
    run = tmp_path / "sft" / "ddp"
    ddp = {k: v for k, v in json.loads((run / "metrics.json").read_text())["metrics"].items() if k.startswith("test/")}
    one = metrics_in_one_process(run)  # the same checkpoint scored in one process
    assert set(one) == set(ddp) == {"test/loss", "test/acc"}
    assert ddp["test/acc"] == one["test/acc"] and ddp["test/loss"] == pytest.approx(one["test/loss"], abs=1e-6)


def test_sft_stopped_by_sigterm_resumes_at_the_next_length_bucketed_batch(setup: list[str], tmp_path: Path) -> None:
    per_epoch, stop = TRAIN // 8, TRAIN // 8 + 5  # stopped mid-way through its second epoch
    args = [*setup, "trainer.max_epochs=2", "trainer.checkpoint_every_n_steps=100"]
    probes, cut = tmp_path / "probes", tmp_path / "sft" / "cut"
    proc = probed_cli.start(probes, "cut", "train", "sft", "--output_dir", str(tmp_path), "name=cut", *args,
                            pause_at=stop)  # fmt: skip
    probed_cli.wait_for([probes / "cut-rank0-paused"], proc)
    proc.send_signal(signal.SIGTERM)
    out, err = probed_cli.finish(proc, probes, "cut", world=1)
    assert proc.returncode == 143, f"exit code {proc.returncode}:\n{out}\n{err}"
    saved = load_checkpoint_file(cut / "checkpoints" / "last.ckpt")
    assert (saved["global_step"], saved["epoch"]) == (stop, 1)
    command = next(line.strip() for line in err.splitlines() if line.strip().startswith("attnkit train"))
    assert command == f"attnkit train sft --resume {shlex.quote(str(cut))}"
    [resumed] = probed_cli.run(probes, "resumed", *shlex.split(command)[1:])
    [full] = probed_cli.run(probes, "full", "train", "sft", "--output_dir", str(tmp_path), "name=full", *args)
    [stopped] = probed_cli.records(probes, "cut")
    assert len(full["steps"]) == 2 * per_epoch
    assert stopped["steps"] == full["steps"][:stop]  # the same run until the signal
    # Resumed at the batch after the last one trained, in the same epoch: nothing repeated, nothing lost
    # (epoch, batch index, step, learning rate and a CRC of the batch itself, every step).
    assert resumed["steps"] == full["steps"][stop:]
    assert len({s[4] for s in full["steps"][per_epoch:]}) == per_epoch  # the epoch's batches all differ
    resumed_weights, full_weights = _weights(cut), _weights(tmp_path / "sft" / "full")
    assert resumed_weights.keys() == full_weights.keys() and resumed_weights
    differing = [k for k in full_weights if not torch.equal(resumed_weights[k], full_weights[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"
