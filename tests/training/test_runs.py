"""End-to-end: real training runs through the CLI and the Python API."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import TINY_REVERSE, run_cli

import attnkit
import background_runs
from attnkit.tasks import load_run
from attnkit.training.checkpoint import CheckpointError, load_checkpoint_file
from cli_inprocess import cli_in_process


def _overrides(items):
    """``["data.seq_len=8", ...]`` as the Python API's keyword overrides, typed as the CLI reads them."""
    return {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in items)}


def test_cli_run_folder_layout_and_summary(tiny_reverse_run: Path):
    run = tiny_reverse_run
    assert (run / "config.yaml").is_file()
    assert (run / "checkpoints" / "best.ckpt").is_file()
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "logs" / "csv" / "metrics.csv").is_file()
    assert any((run / "logs" / "tensorboard").glob("events.out.tfevents.*"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["task"] == "reverse"
    assert set(metrics["metrics"]) == {"val/acc", "val/loss", "test/acc", "test/loss"}
    assert metrics["metrics"]["test/acc"] > 0.5  # 2 short epochs already learn much of the task
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["data"]["seq_len"] == 8 and cfg["trainer"]["max_epochs"] == 2
    header = (run / "logs" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "lr-Adam" in header and "train/loss_step" in header and "val/acc" in header


def test_checkpoint_alone_rebuilds_model_and_is_weights_only(tiny_reverse_run: Path):
    ckpt = tiny_reverse_run / "checkpoints" / "best.ckpt"
    raw = torch.load(ckpt, weights_only=True)  # loads under the safe unpickler
    assert raw["hyper_parameters"]["task"] == "reverse"
    loaded = load_run(ckpt)
    assert loaded.module.model.config.d_model == 32
    x = torch.randint(10, (4, 8))
    logits = loaded.module(x)
    assert logits.shape == (4, 8, 10)


def test_cli_test_and_predict(tiny_reverse_run: Path):
    out = run_cli("test", str(tiny_reverse_run)).stdout
    metrics = json.loads((tiny_reverse_run / "metrics.json").read_text())["metrics"]
    line = next(ln for ln in out.splitlines() if ln.startswith("test/acc"))
    assert float(line.split()[1]) == pytest.approx(metrics["test/acc"], abs=1e-4)
    pred = run_cli("predict", str(tiny_reverse_run), "1 2 3 4 5 6 7 8").stdout.strip().split()
    assert len(pred) == 8 and all(0 <= int(p) < 10 for p in pred)
    bad = cli_in_process("predict", str(tiny_reverse_run), "1 2 3")
    assert bad.returncode == 2 and "trained on sequences of 8 symbols" in bad.stderr


def test_tasks_evaluate_passes_trainer_overrides_as_such(tiny_reverse_run: Path):
    """``attnkit.tasks.evaluate(path, trainer)``: the overrides go to the trainer section (mypy found
    them passed on as the data module)."""
    from attnkit.tasks import evaluate

    metrics = evaluate(tiny_reverse_run, {"batch_size": 7})
    assert set(metrics) == {"test/acc", "test/loss"}


def test_cli_lists_tasks_and_help():
    out = run_cli("tasks").stdout
    assert "reverse" in out and "classify" in out
    for args in (["--help"], ["train", "--help"], ["test", "--help"], ["predict", "--help"]):
        assert "Usage:" in run_cli(*args).stdout


def test_cli_config_errors_exit_2(tmp_path: Path):
    proc = cli_in_process("train", "reverse", "model.d_modle=3")
    assert proc.returncode == 2
    assert "model.d_modle: unknown key" in proc.stderr
    proc = cli_in_process("train", "nosuchtask")
    assert proc.returncode == 2 and "available tasks" in proc.stderr
    printed = cli_in_process("train", "reverse", "--print-config", "model.d_model=64").stdout
    assert yaml.safe_load(printed)["model"]["d_model"] == 64


def test_python_api_returns_model_and_metrics(tmp_path: Path):
    result = attnkit.train("reverse", output_dir=str(tmp_path), name="api", **_overrides(TINY_REVERSE))
    assert result.run_dir == tmp_path / "reverse" / "api"
    assert isinstance(result.model, torch.nn.Module)
    assert 0.0 <= result.metrics["test/acc"] <= 1.0
    assert (result.run_dir / "metrics.json").is_file()
    # A second run in the same process gets its own folder.
    again = attnkit.train("reverse", output_dir=str(tmp_path), **_overrides(TINY_REVERSE))
    assert again.run_dir != result.run_dir


def test_seeded_runs_are_reproducible(tmp_path: Path):
    a = attnkit.train("reverse", output_dir=str(tmp_path), name="a", **_overrides(TINY_REVERSE))
    b = attnkit.train("reverse", output_dir=str(tmp_path), name="b", **_overrides(TINY_REVERSE))
    assert a.metrics == b.metrics
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name


def test_truncated_and_foreign_checkpoints_are_clear_errors(tiny_reverse_run: Path, tmp_path: Path):
    good = tiny_reverse_run / "checkpoints" / "best.ckpt"
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    proc = cli_in_process("test", str(truncated))
    assert proc.returncode == 2 and "truncated or corrupt" in proc.stderr

    with pytest.raises(CheckpointError, match="not an attnkit checkpoint"):
        plain = tmp_path / "plain.ckpt"
        torch.save({"weights": torch.zeros(2)}, plain)
        load_run(plain)

    ckpt = load_checkpoint_file(good)
    ckpt["state_dict"]["model.output_net.4.weight"] = torch.zeros(3, 32)
    mismatched = tmp_path / "mismatched.ckpt"
    torch.save(ckpt, mismatched)
    with pytest.raises(CheckpointError, match="does not fit the model"):
        load_run(mismatched)

    ckpt = load_checkpoint_file(good)
    ckpt["hyper_parameters"]["attnkit_version"] = "9.0.0"
    future = tmp_path / "future.ckpt"
    torch.save(ckpt, future)
    with pytest.raises(CheckpointError, match="incompatible"):
        load_run(future)

    with pytest.raises(CheckpointError, match=r"no model at .*nothing-here: nothing is there"):
        load_run(tmp_path / "nothing-here")


def test_resume_of_another_task_is_refused(tiny_reverse_run: Path):
    ckpt = load_checkpoint_file(tiny_reverse_run / "checkpoints" / "last.ckpt")
    ckpt["hyper_parameters"]["task"] = "classify"
    torch.save(ckpt, tiny_reverse_run / "checkpoints" / "last.ckpt")
    proc = cli_in_process("train", "reverse", "--resume", str(tiny_reverse_run))
    assert proc.returncode == 2 and "checkpoint of task 'classify', not 'reverse'" in proc.stderr


def test_killed_training_resumes_from_last_checkpoint(tmp_path: Path):
    args = [
        "train", "reverse", "--output_dir", str(tmp_path), "name=killed",
        "data.train_size=20000", "data.seq_len=8", "data.val_size=128", "data.test_size=128",
        "trainer.max_epochs=2", "trainer.batch_size=16", "trainer.checkpoint_every_n_steps=25",
        "trainer.threads=1", "trainer.progress_bar=false",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ATTNKIT_RUN_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "attnkit.cli", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    last = tmp_path / "reverse" / "killed" / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    step_at_kill = 0
    while time.time() < deadline and proc.poll() is None:
        if last.is_file():
            try:
                step_at_kill = load_checkpoint_file(last)["global_step"]
            except CheckpointError:  # never expected: writes are atomic
                raise
            if step_at_kill >= 100:
                break
        time.sleep(0.2)
    assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps_per_epoch = 20000 // 16
    assert 100 <= step_at_kill < steps_per_epoch, "killed mid-epoch"
    run = last.parent.parent
    assert not (run / "metrics.json").exists()

    run_cli("train", "reverse", "--resume", str(run))
    final = load_checkpoint_file(last)
    assert final["global_step"] == 2 * steps_per_epoch  # no step lost or repeated
    assert json.loads((run / "metrics.json").read_text())["metrics"]["test/acc"] > 0.9
    assert not list(last.parent.glob(".*.tmp"))


def test_mixed_precision_is_passed_to_lightning(tmp_path: Path):
    result = attnkit.train(
        "reverse",
        output_dir=str(tmp_path),
        name="bf16",
        **_overrides(TINY_REVERSE),
        **{"trainer.precision": "bf16-mixed"},
    )
    assert result.metrics["test/acc"] > 0.5
    assert yaml.safe_load((result.run_dir / "config.yaml").read_text())["trainer"]["precision"] == "bf16-mixed"


DEFAULT_RUN = background_runs.declare(
    "reverse-default",
    ["train", "reverse", "--output_dir", "{out}", "name=default", "trainer.threads=1", "trainer.progress_bar=false"],
)


@pytest.mark.slow
@pytest.mark.background("reverse-default")
@pytest.mark.timeout(3000)
def test_reverse_default_config_reaches_999_percent():
    """The README's headline figure: `attnkit train reverse` with its defaults (about 40 s, in the background)."""
    out, _ = DEFAULT_RUN.result()
    metrics = json.loads((out / "reverse" / "default" / "metrics.json").read_text())
    assert metrics["epochs"] == 10
    assert metrics["metrics"]["test/acc"] >= 0.999
