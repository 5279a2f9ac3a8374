"""``loss.precompute_reference=true`` for dpo and kto: the reference log-probabilities of every record computed once
before training, looked up by the batches' record indices after, no reference copy kept; the losses and metrics
those of the run that computes them at every step; kept in the checkpoints, so a run stopped by SIGTERM and
resumed ends with the uninterrupted run's weights."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from attnkit import api
from attnkit.data.preference.encode import Encoded
from attnkit.data.preference.module import collate_feedback, mismatched
from attnkit.training.checkpoint import load_checkpoint_file
from attnkit.training.preemption import Preempted
from chat_models import build_chat_model

WATCHED = ("train/loss_step", "train/rewards/chosen", "train/rewards/rejected", "train/rewards/margins",
           "train/logps/chosen", "train/logps/rejected")  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny ChatML Llama and sums as pairs (dpo) and as feedback (kto): 16 train, 8 val, 8 test records."""
    folder = tmp_path_factory.mktemp("precompute")
    paths = {"base": build_chat_model(folder / "base", context=64)}
    sums = [(a, b) for a in range(8) for b in range(4)]
    splits = {"train": sums[:16], "val": sums[16:24], "test": sums[24:]}
    for split, numbers in splits.items():
        pairs = [
            {"prompt": [{"role": "user", "content": f"{a} plus {b}?"}],
             "chosen": [{"role": "assistant", "content": f"{a + b}."}],
             "rejected": [{"role": "assistant", "content": f"Maybe {a + b + 1}, or so."}]}
            for a, b in numbers
        ]  # fmt: skip
        feedback = [{"prompt": p["prompt"], "completion": p["chosen" if i % 3 else "rejected"], "label": bool(i % 3)}
                    for i, p in enumerate(pairs)]  # fmt: skip
        for kind, records in (("dpo", pairs), ("kto", feedback)):
            paths[f"{kind}-{split}"] = folder / f"{kind}-{split}.jsonl"
            paths[f"{kind}-{split}"].write_text("".join(json.dumps(r) + "\n" for r in records))
    return paths


def _overrides(data: dict[str, Path], task: str, out: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "model.init": str(data["base"]), "data.source": str(data[f"{task}-train"]),
        "data.val_source": str(data[f"{task}-val"]), "data.test_source": str(data[f"{task}-test"]),
        "model.lora": None, "model.dropout": 0.0, "trainer.batch_size": 4, "trainer.max_epochs": 2,
        "trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False, "trainer.deterministic": True,
        "trainer.log_every_n_steps": 1, "optim.lr": 1e-3, "optim.warmup": 2, "seed": 0, "output_dir": str(out),
        "name": name, **extra,
    }  # fmt: skip


class _Logged(Callback):
    """The train metrics logged at each step."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        self.steps.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})


@pytest.mark.parametrize(
    ("task", "lora"), [("dpo", False), ("kto", False), ("dpo", True)], ids=["dpo", "kto", "dpo-lora"]
)
def test_precomputed_reference_gives_the_same_losses_and_keeps_no_reference_model(
    data: dict[str, Path], task: str, lora: bool, tmp_path: Path
) -> None:
    """Full fine-tuning: no frozen copy is built; LoRA (as TRL allows): the base's log-probs (adapters off) once,
    not at every step."""
    runs = {}
    for precompute in (False, True):
        logged = _Logged()
        overrides = _overrides(data, task, tmp_path, f"pre{precompute}", **{"loss.precompute_reference": precompute,
                               "trainer.max_epochs": 1})  # fmt: skip
        if lora:
            overrides.update({"model.lora": {"rank": 4, "alpha": 8.0}, "optim.lr": 1e-2})
        runs[precompute] = (api.train(task, callbacks=[logged], **overrides), logged.steps)
    (live, live_steps), (pre, pre_steps) = runs[False], runs[True]
    assert len(live_steps) == len(pre_steps) == 4
    assert set(WATCHED) <= set(live_steps[0])
    for a, b in zip(live_steps, pre_steps):
        for key in WATCHED:  # kto: NaN for a batch without desirable (or undesirable) records, in both runs
            assert b[key] == pytest.approx(a[key], abs=1e-6, nan_ok=True), key
    for key, value in live.metrics.items():  # val/ and test/: the same records' reference log-probs
        if key.startswith(("val/", "test/")):
            assert pre.metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True), key
    # no reference model: the module's parameters are the policy's (the live run holds a second copy)
    policy = sum(p.numel() for p in pre.module.model.parameters())
    assert pre.module.reference is None and sum(p.numel() for p in pre.module.parameters()) == policy
    if not lora:
        assert sum(p.numel() for p in live.module.parameters()) == 2 * policy
    # every split's values are in the checkpoint, one row per record
    saved = load_checkpoint_file(pre.run_dir / "checkpoints" / "last.ckpt")["precomputed_reference"]
    assert {split: tuple(v["logps"].shape) for split, v in saved.items()} == {
        "train": (16, 2), "val": (8, 2), "test": (8, 2)}  # fmt: skip


class _SignalAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("task", ["dpo", "kto"])
def test_a_precomputed_run_stopped_by_sigterm_resumes_to_the_uninterrupted_runs_weights(
    data: dict[str, Path], task: str, tmp_path: Path
) -> None:
    overrides = _overrides(data, task, tmp_path, "full", **{"loss.precompute_reference": True})
    full = api.train(task, **overrides)
    cut = {**overrides, "name": "cut", "trainer.checkpoint_every_n_steps": None}
    with pytest.raises(Preempted):
        api.train(task, callbacks=[_SignalAt(6)], **cut)  # mid-way through the second epoch
    run = tmp_path / task / "cut"
    stopped = load_checkpoint_file(run / "checkpoints" / "last.ckpt")
    assert stopped["global_step"] == 6 and "precomputed_reference" in stopped
    resumed = api.train(task, resume=run)
    assert resumed.run_dir == run
    got, want = resumed.module.model.state_dict(), full.module.model.state_dict()
    differing = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"
    assert resumed.metrics["test/loss"] == full.metrics["test/loss"]


def test_precomputed_values_of_other_data_are_refused_when_no_reference_is_left(
    data: dict[str, Path], tmp_path: Path
) -> None:
    """A trained full fine-tuning run keeps no reference: tested on other data, it says so instead of scoring
    against the wrong records' log-probabilities."""
    run = api.train("dpo", **_overrides(data, "dpo", tmp_path, "run", **{"loss.precompute_reference": True,
                                                                         "trainer.max_epochs": 1}))  # fmt: skip
    assert api.evaluate(run.run_dir)["test/loss"] == pytest.approx(run.metrics["test/loss"], abs=1e-6)  # its own
    with pytest.raises(ValueError, match=r"test split's precomputed reference log-probabilities .* other data"):
        api.evaluate(run.run_dir, data=data["dpo-val"])


def test_kto_pairs_its_kl_sequences_per_record_in_chunks_of_the_batch_size() -> None:
    """TRL's pairing, fixed per record (a shuffled batch gets each record's own KL sequence, so it can be
    precomputed): prompt i of a chunk with the completion of record i - 1 of that chunk."""
    seqs = [Encoded([10 * i + 1, 10 * i + 2, 10 * i + 3], 2) for i in range(3)]
    assert [s.ids for s in mismatched(seqs, 8)] == [[1, 2, 23], [11, 12, 3], [21, 22, 13]]
    rows = [(s, True, k) for s, k in zip(seqs, mismatched(seqs, 8))]
    shuffled = [rows[2], rows[0]]  # a batch of records 2 and 0: their own KL sequences, not re-paired
    assert collate_feedback(shuffled, pad_id=0, max_len=8)[4].tolist() == [[-100, 13], [-100, 23]]
    # rows without their KL sequences are paired within the batch (one batch of records, as TRL's test compares)
    assert collate_feedback([r[:2] for r in shuffled], pad_id=0, max_len=8)[4].tolist() == [[-100, 3], [-100, 23]]
