"""The training timeline: ``trainer.snapshot_every_n_steps=K`` keeps the weights every K optimiser steps (and at
step 0 and the end) in ``<run>/snapshots/``, resuming adds none twice, and ``attnkit inspect over-training`` reads
them (one entry per snapshot)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from cli_helpers import QUIET_TRAINING
from click.testing import CliRunner

from attnkit.api import build_config, inspect_over_training, train
from attnkit.cli import main
from attnkit.errors import ConfigError
from attnkit.training.checkpoint import load_checkpoint_file

K = 3
TINY = {
    **QUIET_TRAINING,
    "data.builtin_documents": 60,
    "model.max_len": 32,
    "model.d_model": 32,
    "model.num_layers": 2,
    "model.num_heads": 2,
    "model.dim_feedforward": 64,
    "trainer.max_epochs": 1,
    "trainer.loggers": ["csv"],
    "trainer.snapshot_every_n_steps": K,
}


class Recorder(L.Callback):
    """The model's weights when each multiple of ``every`` optimiser steps is first reached (what its snapshot must
    hold), and the losses of the batches computed with them (``outputs["loss"]``: the loss without accumulation)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.losses: dict[int, list[float]] = {}
        self.means: dict[int, list[float]] = {}  # TaskModule.last_train_loss: each batch's mean loss
        self.current: int | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        self.current = step
        if step % self.every == 0 and step not in self.weights:
            self.weights[step] = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, *args: Any) -> None:
        assert self.current is not None
        self.losses.setdefault(self.current, []).append(float(outputs["loss"]))
        self.means.setdefault(self.current, []).append(float(pl_module.last_train_loss))


def train_recorded(out: Path, every: int, **overrides: Any) -> dict[str, Any]:
    recorder = Recorder(every)
    settings = {**TINY, "trainer.snapshot_every_n_steps": every, **overrides}
    result = train("lm", output_dir=str(out), name="a", callbacks=[recorder], **settings)
    return {"dir": Path(result.run_dir), "recorder": recorder}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train_recorded(tmp_path_factory.mktemp("snap"), K)


def index(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "snapshots" / "index.json").read_text())["snapshots"]


def snapshot(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run_dir / "snapshots" / f"step-{step:06d}.pt")["state_dict"]


def check_snapshots(run: dict[str, Any], every: int) -> list[dict[str, Any]]:
    """The snapshots are at steps 0, every, 2 * every, ... and the last step, each the weights then."""
    run_dir = run["dir"]
    last = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")
    final_step = int(last["global_step"])
    assert final_step > 2 * every and final_step % every  # the end is a snapshot of its own
    entries = index(run_dir)
    steps = [e["step"] for e in entries]
    assert steps == [*range(0, final_step, every), final_step]
    recorded = run["recorder"].weights
    assert sorted(recorded) == steps[:-1]
    for step in steps[:-1]:
        saved = snapshot(run_dir, step)
        assert saved.keys() == recorded[step].keys()
        assert all(torch.equal(saved[k], v) for k, v in recorded[step].items()), step
    final = {k.removeprefix("model."): v for k, v in last["state_dict"].items()}
    saved = snapshot(run_dir, final_step)
    assert saved.keys() == final.keys() and all(torch.equal(saved[k], v) for k, v in final.items())
    start = snapshot(run_dir, 0)
    assert any(not torch.equal(start[k], v) for k, v in saved.items())  # training changed the weights
    assert entries[-1]["loss"] is None and all(math.isfinite(e["loss"]) for e in entries[:-1])
    return entries


def test_snapshots_are_the_weights_at_every_k_steps_and_at_the_end(run: dict[str, Any]) -> None:
    entries = check_snapshots(run, K)
    for entry in entries[:-1]:  # the loss of the batch computed with the snapshot's weights
        assert entry["loss"] == pytest.approx(run["recorder"].losses[entry["step"]][0], rel=1e-6)
    assert entries[0]["loss"] > entries[-2]["loss"]  # the untrained model's loss is the highest


def test_snapshot_steps_are_optimiser_steps_with_accumulation(tmp_path: Path) -> None:
    run = train_recorded(tmp_path, 2, **{"trainer.accumulate_grad_batches": 2})
    entries = check_snapshots(run, 2)
    means = run["recorder"].means
    for entry in entries[:-1]:  # the mean of the step's two batches' mean losses
        assert len(means[entry["step"]]) == 2
        assert entry["loss"] == pytest.approx(sum(means[entry["step"]]) / 2, rel=1e-6)


def test_resuming_keeps_the_snapshots_and_adds_none_twice(run: dict[str, Any], tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(run["dir"], tmp_path / "a"))
    before = index(run_dir)
    files = {e["file"]: (run_dir / "snapshots" / e["file"]).read_bytes() for e in before}
    train("lm", resume=run_dir, **{"trainer.max_epochs": 2})
    after = index(run_dir)
    steps = [e["step"] for e in after]
    assert steps == sorted(set(steps)) and len(steps) > len(before)
    assert after[: len(before)] == before  # kept as they were, losses included
    assert all((run_dir / "snapshots" / name).read_bytes() == data for name, data in files.items())
    final_step = int(load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")["global_step"])
    new = [s for s in range(0, final_step, K) if s > before[-1]["step"]]
    assert steps == [e["step"] for e in before] + new + [final_step]


def test_inspect_over_training_has_one_entry_per_snapshot(run: dict[str, Any], tmp_path: Path) -> None:
    figure = tmp_path / "timeline.png"
    args = ["inspect", "over-training", str(run["dir"]), "--length", "4", "--batch", "1"]
    out = CliRunner().invoke(main, [*args, "--json", "--out", str(figure)])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    entries = index(run["dir"])
    assert [s["step"] for s in result["snapshots"]] == [e["step"] for e in entries]
    assert result["loss"] == [e["loss"] for e in entries]
    for row in result["snapshots"]:
        assert len(row["induction"]) == 2 and len(row["induction"][0]) == 2
        assert 0.0 <= row["max_induction"] <= 1.0
    assert figure.stat().st_size > 0
    first, last = result["snapshots"][0], result["snapshots"][-1]
    assert first["previous_token"] != last["previous_token"]  # each snapshot's own weights were read


def test_a_run_without_snapshots_is_a_clear_error(run: dict[str, Any], tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(run["dir"], tmp_path / "a"))
    shutil.rmtree(run_dir / "snapshots")
    with pytest.raises(ValueError, match=r"no weight snapshots .* trainer.snapshot_every_n_steps=K"):
        inspect_over_training(run_dir)
    out = CliRunner().invoke(main, ["inspect", "over-training", str(run_dir)])
    assert out.exit_code == 2 and "trainer.snapshot_every_n_steps=K" in out.output


@pytest.mark.parametrize("value", [0, -3, "x", "5", 2.5, True])
def test_wrong_snapshot_intervals_are_config_errors(value: object) -> None:
    with pytest.raises(ConfigError, match=r"trainer.snapshot_every_n_steps: Input should be"):
        build_config("lm", overrides={"trainer.snapshot_every_n_steps": value})


def test_snapshots_under_fsdp_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"snapshot_every_n_steps does not work with trainer.strategy=fsdp"):
        build_config("lm", overrides={"trainer.snapshot_every_n_steps": 5, "trainer.strategy": "fsdp"})


def test_a_model_folder_or_an_encoder_is_a_clear_error(tmp_path: Path) -> None:
    from attnkit.interop import save_model
    from attnkit.models.bert import BertConfig, BertEncoder
    from attnkit.models.lm import LanguageModel, LanguageModelConfig
    from attnkit.text.tokenizers import build_tokenizer

    tok = build_tokenizer("char", ["the cat sat on the mat"])
    small = {"vocab_size": tok.vocab_size, "d_model": 16, "num_heads": 2, "num_layers": 1, "dim_feedforward": 16}
    bert = save_model(BertEncoder(BertConfig(**small, max_len=32)), tmp_path / "bert", tokenizer=tok)
    lm = save_model(LanguageModel(LanguageModelConfig(**small, max_len=32)), tmp_path / "lm", tokenizer=tok)
    with pytest.raises(ValueError, match=r"BertEncoder \('bert'\), which attnkit inspect over-training does not"):
        inspect_over_training(bert)
    with pytest.raises(ValueError, match=r"no weight snapshots .* trainer.snapshot_every_n_steps=K"):
        inspect_over_training(lm)  # a model folder is no run: it has no timeline


def test_a_lora_run_keeps_its_adapters(run: dict[str, Any], tmp_path: Path) -> None:
    from attnkit.models.lora import lora_state_keys
    from attnkit.tasks import load_run
    from attnkit.training.snapshots import load_snapshot, read_snapshot_index

    lora = {"rank": 2, "alpha": 4, "targets": ["qkv"]}
    result = train("lm", output_dir=str(tmp_path), name="lora", **{**TINY, "model.init": str(run["dir"])},
                   **{"model.lora": lora})  # fmt: skip
    entries = read_snapshot_index(result.run_dir)
    final = snapshot(Path(result.run_dir), entries[-1]["step"])
    model = load_run(result.run_dir).module.model
    assert sorted(final) == sorted(lora_state_keys(model)) and all("lora_" in k for k in final)
    trained = model.state_dict()
    load_snapshot(model, result.run_dir, entries[0])  # the adapters at step 0: B is zero
    assert all(torch.equal(v, torch.zeros_like(v)) for k, v in model.state_dict().items() if "lora_B" in k)
    load_snapshot(model, result.run_dir, entries[-1])
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())
    timeline = inspect_over_training(result.run_dir, length=4, batch=1)
    assert [s["step"] for s in timeline["snapshots"]] == [e["step"] for e in entries]
