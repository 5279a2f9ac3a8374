"""Preemption: a SIGTERM'd (or SIGUSR1'd) run saves last.ckpt, says how to continue, exits 128 + signal;
continued, it starts at the saved step, inside the saved epoch, with the saved optimizer and LR schedule,
runs only the steps that were left, and ends with the very weights of a run that was never stopped; in
one process and under DDP.

Equal final weights alone cannot tell a resume from a restart (seeded weights and data order make a run
started over from step 0 end the same): the runs are probed (probed_cli.py), and the steps each process
really ran are compared with the uninterrupted run's."""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path
from typing import Any

import probed_cli
import pytest
import torch
from cli_helpers import TINY_REVERSE
from lightning.pytorch.callbacks import Callback

import attnkit
from attnkit.config import parse_overrides
from attnkit.errors import ConfigError, Preempted
from attnkit.training.checkpoint import load_checkpoint_file

# 3 epochs of 125 steps; a step checkpoint every 10 steps (the signal's checkpoint must be newer).
ARGS = [
    *TINY_REVERSE,
    "trainer.max_epochs=3",
    "trainer.deterministic=true",
    "trainer.checkpoint_every_n_steps=10",
    "trainer.report=false",
]
PER_EPOCH = 4000 // 32
TOTAL_STEPS = 3 * PER_EPOCH
STOP = PER_EPOCH + 38  # the step the run is stopped at: mid-epoch, in its second epoch

# Under DDP (2 CPU processes, gloo, 1 thread each): 3 epochs of 1024 / 2 / 32 = 16 steps.
DDP_ARGS = [
    "data.train_size=1024", "data.val_size=128", "data.test_size=256", "data.seq_len=8", "trainer.max_epochs=3",
    "trainer.batch_size=32", "trainer.threads=1", "trainer.progress_bar=false", "optim.lr=2e-3", "optim.warmup=10",
    "trainer.report=false", "trainer.deterministic=true", "trainer.accelerator=cpu", "trainer.strategy=ddp",
    "trainer.devices=2",
]  # fmt: skip
DDP_PER_EPOCH = 1024 // 2 // 32
DDP_STOP = DDP_PER_EPOCH + 5


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run / "checkpoints" / "last.ckpt")["state_dict"]


def _assert_equal(actual: Any, saved: Any, where: str) -> None:
    """``actual`` (a state dict) equals ``saved`` exactly, tensors included."""
    if isinstance(saved, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, saved), where
    elif isinstance(saved, dict):
        assert isinstance(actual, dict), f"{where}: {type(actual).__name__}, not a dict"
        assert actual.keys() == saved.keys(), f"{where}: keys {list(actual)} != {list(saved)}"
        for key in saved:
            _assert_equal(actual[key], saved[key], f"{where}[{key!r}]")
    elif isinstance(saved, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(saved), f"{where}: length {len(actual)}"
        for i, (a, b) in enumerate(zip(actual, saved)):
            _assert_equal(a, b, f"{where}[{i}]")
    else:
        assert actual == saved, f"{where}: {actual!r} != {saved!r}"


def _assert_stopped_mid_epoch(saved: dict[str, Any], step: int, per_epoch: int) -> None:
    """The checkpoint is of training step ``step``, inside its epoch (the epoch's batches partly done)."""
    assert saved["global_step"] == step
    batches = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert (saved["epoch"], batches["processed"]) == (step // per_epoch, step % per_epoch)
    assert 0 < batches["processed"] < per_epoch  # mid-epoch
    adam = saved["optimizer_states"][0]["state"]
    assert adam and all(int(s["step"]) == step for s in adam.values())  # moments of `step` steps, to restore


def _assert_resumed(
    probes: Path, rank: int, saved: dict[str, Any], resumed: dict[str, Any], full: dict[str, Any], step: int
) -> None:
    """A process of the resumed run (``resumed``: its probe record) continued the stopped run from the
    checkpoint ``saved`` of training step ``step``, and ran the rest exactly as the uninterrupted run
    (``full``) did."""
    per_epoch = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    first = resumed["steps"][0]
    # Its first step: the saved step, in the saved epoch, at the batch after the saved one.
    assert first[:3] == [saved["epoch"], per_epoch, step], f"the resumed run started at {first[:3]}"
    # Every step after it once, none before it again: [step, total).
    total = len(full["steps"])
    assert [s[2] for s in resumed["steps"]] == list(range(step, total))
    # Epoch, batch index, learning rate and the batch itself of every step: those of the uninterrupted run.
    assert resumed["steps"] == full["steps"][step:]
    # At its first step, the optimizer (Adam's moments, the LR) and the LR schedule are those saved.
    start = torch.load(probes / f"resumed-rank{rank}-start.pt", weights_only=True)
    _assert_equal(start["optimizer"], saved["optimizer_states"][0], "optimizer state")
    _assert_equal(start["scheduler"], saved["lr_schedulers"][0], "LR scheduler state")
    assert first[3] == saved["optimizer_states"][0]["param_groups"][0]["lr"]


def test_sigterm_mid_epoch_and_the_resumed_run_continues_where_it_stopped(tmp_path: Path):
    probes, cut = tmp_path / "probes", tmp_path / "reverse" / "cut"
    proc = probed_cli.start(
        probes, "cut", "train", "reverse", "--output_dir", str(tmp_path), "name=cut", *ARGS, pause_at=STOP
    )
    probed_cli.wait_for([probes / "cut-rank0-paused"], proc)  # at the end of step STOP, waiting for the signal
    proc.send_signal(signal.SIGTERM)
    out, err = probed_cli.finish(proc, probes, "cut", world=1)
    assert proc.returncode == 143, f"exit code {proc.returncode}:\n{out}\n{err}"
    saved = load_checkpoint_file(cut / "checkpoints" / "last.ckpt")  # complete and loadable
    _assert_stopped_mid_epoch(saved, STOP, PER_EPOCH)
    assert f"stopped at step {STOP}, epoch 1;" in err
    assert "metrics.json" not in os.listdir(cut)  # stopped, not finished

    command = next(line.strip() for line in err.splitlines() if line.strip().startswith("attnkit train"))
    assert command == f"attnkit train reverse --resume {shlex.quote(str(cut))}"
    [resumed] = probed_cli.run(probes, "resumed", *shlex.split(command)[1:])
    assert (cut / "metrics.json").is_file()
    [full] = probed_cli.run(probes, "full", "train", "reverse", "--output_dir", str(tmp_path), "name=full", *ARGS)
    assert len(full["steps"]) == TOTAL_STEPS
    [stopped] = probed_cli.records(probes, "cut")
    assert stopped["steps"] == full["steps"][:STOP]  # the same run until the signal
    _assert_resumed(probes, 0, saved, resumed, full, STOP)

    resumed_weights, full_weights = _weights(cut), _weights(tmp_path / "reverse" / "full")
    assert resumed_weights.keys() == full_weights.keys()
    # Exactly equal: the data loader's position and generator are restored (StatefulDataLoader).
    differing = [k for k in full_weights if not torch.equal(resumed_weights[k], full_weights[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"


def test_ddp_run_stopped_by_sigterm_resumes_where_it_stopped_on_both_processes(tmp_path: Path):
    probes, cut = tmp_path / "probes", tmp_path / "reverse" / "cut"
    proc = probed_cli.start(
        probes, "cut", "train", "reverse", "--output_dir", str(tmp_path), "name=cut", *DDP_ARGS, pause_at=DDP_STOP
    )
    # Both processes at the end of step DDP_STOP; the first one is signalled (and passes it to the other).
    probed_cli.wait_for([probes / "cut-rank0-paused", probes / "cut-rank1-paused"], proc)
    proc.send_signal(signal.SIGTERM)
    out, err = probed_cli.finish(proc, probes, "cut", world=2)
    stopped = probed_cli.records(probes, "cut", world=2)
    assert proc.returncode == 143 and [r["code"] for r in stopped] == [143, 143], f"{stopped}\n{out}\n{err}"
    assert [(r["world_size"], r["global_rank"]) for r in stopped] == [(2, 0), (2, 1)]
    saved = load_checkpoint_file(cut / "checkpoints" / "last.ckpt")
    _assert_stopped_mid_epoch(saved, DDP_STOP, DDP_PER_EPOCH)
    assert f"attnkit train reverse --resume {shlex.quote(str(cut))}" in err

    resumed = probed_cli.run(probes, "resumed", "train", "reverse", "--resume", str(cut), world=2)
    full = probed_cli.run(
        probes, "full", "train", "reverse", "--output_dir", str(tmp_path), "name=full", *DDP_ARGS, world=2
    )
    assert [(r["world_size"], r["global_rank"]) for r in resumed + full] == [(2, 0), (2, 1)] * 2
    assert len({r["pid"] for r in resumed}) == 2  # two processes
    assert [len(r["steps"]) for r in full] == [3 * DDP_PER_EPOCH] * 2
    for rank in (0, 1):
        assert stopped[rank]["steps"] == full[rank]["steps"][:DDP_STOP]
        _assert_resumed(probes, rank, saved, resumed[rank], full[rank], DDP_STOP)
    assert {s[4] for s in full[0]["steps"]}.isdisjoint(s[4] for s in full[1]["steps"])  # each its own shard

    resumed_weights, full_weights = _weights(cut), _weights(tmp_path / "reverse" / "full")
    differing = [k for k in full_weights if not torch.equal(resumed_weights[k], full_weights[k])]
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
    probe = probed_cli.probe(tmp_path, "requeued")
    result = attnkit.train("reverse", callbacks=[probe], **overrides)  # the same command, requeued
    assert result.run_dir == run and (run / "metrics.json").is_file()
    assert load_checkpoint_file(last)["global_step"] == 2 * PER_EPOCH
    # It continued (epoch 0, batch 30, step 30 first; then every later step once), did not start over.
    steps = probe.record["steps"]
    assert steps[0][:3] == [0, 30, 30] and [s[2] for s in steps] == list(range(30, 2 * PER_EPOCH))

    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # not a requeue: an existing run is never overwritten
    with pytest.raises(ConfigError, match="already exists"):
        attnkit.train("reverse", **overrides)


class _Batches(Callback):
    """Each training batch's (epoch, step, a digest of the inputs, the sum of the first weight before the step)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int, float]] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        first = float(next(pl_module.parameters()).detach().sum())
        self.seen.append((trainer.current_epoch, trainer.global_step, int(batch[0].sum()), first))


def test_a_run_resumed_from_an_epoch_end_checkpoint_trains_the_next_epoch_as_the_uninterrupted_run(tmp_path: Path):
    """Lightning restores no loader state from a checkpoint written at an epoch's end: the resumed run's loader
    starts afresh, and once repeated epoch 0's order as its epoch 1. Its epoch 1 must be the uninterrupted
    run's: the same batches, on the same weights (the schedule fixed by optim.max_iters, so that max_epochs=1
    then 2 is the same run)."""
    common = {
        "data.train_size": 96, "data.val_size": 32, "data.test_size": 32, "data.seq_len": 6,
        "trainer.batch_size": 16, "trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False,
        "trainer.deterministic": True, "model.d_model": 16, "model.dim_feedforward": 32, "model.num_layers": 1,
        "model.num_heads": 1, "optim.max_iters": 1000, "optim.warmup": 2,
    }  # fmt: skip
    whole, first, rest = _Batches(), _Batches(), _Batches()
    attnkit.train("reverse", output_dir=str(tmp_path), name="whole", callbacks=[whole], **common,
                  **{"trainer.max_epochs": 2})  # fmt: skip
    cut = attnkit.train("reverse", output_dir=str(tmp_path), name="cut", callbacks=[first], **common,
                        **{"trainer.max_epochs": 1})  # fmt: skip
    attnkit.train("reverse", resume=str(cut.run_dir), callbacks=[rest], **{"trainer.max_epochs": 2})
    assert [s[0] for s in whole.seen] == [0] * 6 + [1] * 6
    assert [s[2] for s in whole.seen[6:]] != [s[2] for s in whole.seen[:6]]  # epoch 1: another order
    assert first.seen + rest.seen == whole.seen


def test_last_checkpoint_is_the_newest_state_even_when_the_last_epochs_did_not_beat_the_best(tmp_path: Path):
    """A learning rate too small to change the validation accuracy: epoch 1 is the best and epochs 2-3 only tie
    it. last.ckpt must still hold the end of epoch 3 (Lightning's save_last copied only the checkpoints that beat
    the best: last.ckpt stayed at epoch 1, and resuming the run to train it longer lost epochs 2-3)."""
    run = attnkit.train(
        "reverse", output_dir=str(tmp_path), name="flat",
        **{"data.train_size": 64, "data.val_size": 32, "data.test_size": 32, "data.seq_len": 6,
           "trainer.batch_size": 16, "trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False,
           "model.d_model": 16, "model.dim_feedforward": 32, "model.num_layers": 1, "model.num_heads": 1,
           "optim.lr": 1e-12, "optim.warmup": 0, "trainer.max_epochs": 3},
    ).run_dir  # fmt: skip
    last = load_checkpoint_file(run / "checkpoints" / "last.ckpt")
    best = load_checkpoint_file(run / "checkpoints" / "best.ckpt")
    assert best["global_step"] == 4  # epoch 1 (4 steps an epoch): the later ones only tie it
    assert last["global_step"] == 12 and last["epoch"] == 2
