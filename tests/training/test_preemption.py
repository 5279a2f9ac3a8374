"""Preemption: a SIGTERM'd (or SIGUSR1'd) run saves last.ckpt, says how to continue, exits 128 + signal;
continued, it ends with the very weights of a run that was never stopped."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import TINY_REVERSE, run_cli
from lightning.pytorch.callbacks import Callback

import attnkit
from attnkit.config import parse_overrides
from attnkit.errors import ConfigError, Preempted
from attnkit.training.checkpoint import load_checkpoint_file

# 4 epochs of 125 steps; a step checkpoint every 10 steps tells the test that training is underway.
ARGS = [
    *TINY_REVERSE,
    "trainer.max_epochs=4",
    "trainer.deterministic=true",
    "trainer.checkpoint_every_n_steps=10",
    "trainer.report=false",
]
TOTAL_STEPS = 4 * 4000 // 32


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended ({proc.returncode}) before {path} was written:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} was not written within {timeout} s")
        time.sleep(0.02)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run / "checkpoints" / "last.ckpt")["state_dict"]


def test_sigterm_saves_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path: Path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cut = tmp_path / "reverse" / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnkit.cli", "train", "reverse", "--output_dir", str(tmp_path), "name=cut", *ARGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _wait_for(cut / "checkpoints" / "last.ckpt", proc)  # the first step checkpoint: training is underway
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, f"exit code {proc.returncode}:\n{out}\n{err}"
    saved = load_checkpoint_file(cut / "checkpoints" / "last.ckpt")  # complete and loadable
    assert 10 <= saved["global_step"] < TOTAL_STEPS, saved["global_step"]
    assert f"stopped at step {saved['global_step']}," in err
    assert "metrics.json" not in os.listdir(cut)  # stopped, not finished

    command = next(line.strip() for line in err.splitlines() if line.strip().startswith("attnkit train"))
    assert command == f"attnkit train reverse --resume {shlex.quote(str(cut))}"
    run_cli(*shlex.split(command)[1:])
    assert (cut / "metrics.json").is_file()

    run_cli("train", "reverse", "--output_dir", str(tmp_path), "name=full", *ARGS)
    resumed, full = _weights(cut), _weights(tmp_path / "reverse" / "full")
    assert resumed.keys() == full.keys()
    # Exactly equal: the data loader's position and generator are restored (StatefulDataLoader).
    differing = [k for k in full if not torch.equal(resumed[k], full[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"


class _SignalAt(Callback):
    """Sends this process ``signum`` at the end of training step ``step``."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step

    def on_train_batch_end(self, trainer, *args) -> None:  # type: ignore[no-untyped-def]
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def test_sigusr1_stops_with_138_and_a_checkpoint_of_that_step(tmp_path: Path):
    overrides = {"output_dir": str(tmp_path), "name": "usr1", "trainer.checkpoint_every_n_steps": None}
    with pytest.raises(Preempted) as stopped:
        attnkit.train("reverse", parse_overrides(TINY_REVERSE), callbacks=[_SignalAt(signal.SIGUSR1, 7)], **overrides)
    assert stopped.value.code == 138 and stopped.value.signum == signal.SIGUSR1
    last = tmp_path / "reverse" / "usr1" / "checkpoints" / "last.ckpt"
    assert stopped.value.checkpoint == last
    assert load_checkpoint_file(last)["global_step"] == 7  # saved at the step the signal came in
    assert f"attnkit train reverse --resume {tmp_path / 'reverse' / 'usr1'}" in str(stopped.value)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # the handler is gone with the run


def test_a_requeued_slurm_job_continues_its_own_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # What SLURM sets for a one-task job; a requeued job runs the same command with SLURM_RESTART_COUNT=1.
    for key, value in {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
                       "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    overrides = {**parse_overrides([*TINY_REVERSE, "trainer.report=false"]), "output_dir": str(tmp_path)}
    run = tmp_path / "reverse" / "slurm-4242"  # named after the job: the same on every node and after a requeue
    last = run / "checkpoints" / "last.ckpt"
    with pytest.raises(Preempted) as stopped:  # SLURM stops the job (scancel --signal, preemption, time limit)
        attnkit.train("reverse", callbacks=[_SignalAt(signal.SIGTERM, 30)], **overrides)
    assert stopped.value.code == 143 and stopped.value.checkpoint == last
    assert load_checkpoint_file(last)["global_step"] == 30

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    result = attnkit.train("reverse", **overrides)  # the same command, requeued: continues, does not start over
    assert result.run_dir == run and (run / "metrics.json").is_file()
    assert load_checkpoint_file(last)["global_step"] == 2 * 4000 // 32

    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # not a requeue: an existing run is never overwritten
    with pytest.raises(ConfigError, match="already exists"):
        attnkit.train("reverse", **overrides)
