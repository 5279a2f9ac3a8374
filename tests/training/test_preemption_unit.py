"""PreemptionCheckpoint, one hook at a time: what its docstrings promise, against a stand-in trainer that has
only the public attributes the callback reads. Milliseconds each, so that mutation testing
(tools/mutation.py) can run them per mutant; test_preemption.py runs the real thing end to end."""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from attnkit.errors import Preempted
from attnkit.training import preemption
from attnkit.training.preemption import PreemptionCheckpoint


class Strategy:
    """``trainer.strategy``: ``reduce`` records what it got and answers the other processes' maximum."""

    def __init__(self, others: int = 0) -> None:
        self.others = others  # the largest signal number of the other processes
        self.root_device = torch.device("meta")  # not the default device: the tensor must be put there
        self.calls: list[tuple[torch.device, Any]] = []  # (the tensor's device, reduce_op) of each call

    def reduce(self, tensor: torch.Tensor, reduce_op: Any = None) -> torch.Tensor:
        self.calls.append((tensor.device, reduce_op))
        return torch.tensor(self.others)


@dataclass
class Trainer:
    received_sigterm: bool = False
    world_size: int = 1
    is_global_zero: bool = True
    global_step: int = 7
    current_epoch: int = 2
    sanity_checking: bool = False
    strategy: Any = field(default_factory=Strategy)
    state: Any = field(default_factory=lambda: SimpleNamespace(fn=TrainerFn.FITTING))
    saved: list[Any] = field(default_factory=list)

    def save_checkpoint(self, path: Any) -> None:
        self.saved.append(path)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return tmp_path / "run dir" / "checkpoints" / "last.ckpt"


@pytest.fixture
def callback(ckpt: Path) -> PreemptionCheckpoint:
    return PreemptionCheckpoint(lambda: ckpt)


@pytest.fixture
def sigusr1() -> Iterator[None]:
    """SIGUSR1 at SIG_DFL during the test, and whatever it was before afterwards."""
    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, before)


# ---------------------------------------------------------------- Preempted
def test_preempted_is_a_system_exit_with_128_plus_the_signal(tmp_path: Path):
    term = Preempted(int(signal.SIGTERM), tmp_path, "how to go on")
    assert isinstance(term, SystemExit) and term.code == 143 and term.signum == signal.SIGTERM
    assert term.checkpoint == tmp_path and str(term) == "how to go on" and term.is_global_zero is True
    usr1 = Preempted(int(signal.SIGUSR1), None, "m", is_global_zero=False)
    assert usr1.code == 138 and usr1.checkpoint is None and usr1.is_global_zero is False


# ---------------------------------------------------------------- a fresh callback
def test_a_fresh_callback_has_no_signal_and_saved_nothing(callback: PreemptionCheckpoint, ckpt: Path):
    assert callback.signum is None and callback.saved is None and callback.checkpoint() == ckpt
    trainer = Trainer()
    callback.on_train_batch_end(trainer, None, None, None, 0)  # no signal: nothing happens
    assert trainer.saved == [] and callback.signum is None and callback.saved is None


def test_ending_a_run_that_installed_nothing_leaves_sigusr1_alone(callback: PreemptionCheckpoint, sigusr1):
    callback.on_train_end(Trainer(), None)
    callback.teardown(Trainer(), None, "fit")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


# ---------------------------------------------------------------- SIGTERM at the end of a batch
def test_sigterm_saves_last_ckpt_and_raises_preempted(callback: PreemptionCheckpoint, ckpt: Path):
    trainer = Trainer(received_sigterm=True)
    with pytest.raises(Preempted) as info:
        callback.on_train_batch_end(trainer, None, None, None, 0)
    exc = info.value
    assert exc.code == 143 and exc.signum == signal.SIGTERM and exc.checkpoint == ckpt
    assert str(exc) == "stopped by a signal" and exc.is_global_zero is True
    assert trainer.saved == [ckpt] and callback.saved == ckpt and callback.signum == signal.SIGTERM
    assert trainer.strategy.calls == []  # one process: no all-reduce


def test_preempted_says_whether_this_process_is_global_zero(callback: PreemptionCheckpoint):
    with pytest.raises(Preempted) as info:
        callback.on_train_batch_end(Trainer(received_sigterm=True, is_global_zero=False), None, None, None, 0)
    assert info.value.is_global_zero is False


# ---------------------------------------------------------------- SIGUSR1: our handler, when Lightning has none
def test_sigusr1_handler_is_installed_at_train_start_and_restored_at_train_end(
    callback: PreemptionCheckpoint, ckpt: Path, sigusr1
):
    trainer = Trainer()
    callback.on_train_start(trainer, None)
    try:
        assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        callback.on_train_batch_end(trainer, None, None, None, 0)  # no signal yet
        assert trainer.saved == []
        signal.raise_signal(signal.SIGUSR1)  # handled: the test process goes on
        with pytest.raises(Preempted) as info:
            callback.on_train_batch_end(trainer, None, None, None, 1)
        assert info.value.code == 138 and info.value.signum == signal.SIGUSR1 and info.value.checkpoint == ckpt
        assert trainer.saved == [ckpt] and callback.signum == signal.SIGUSR1
    finally:
        callback.on_train_end(trainer, None)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    callback.teardown(trainer, None, "fit")  # Lightning calls both: the second restores nothing more
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_teardown_restores_the_previous_sigusr1_handler(callback: PreemptionCheckpoint, sigusr1):
    callback.on_train_start(Trainer(), None)
    try:
        assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL
    finally:
        callback.teardown(Trainer(), None, "fit")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    callback.on_train_end(Trainer(), None)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_sigterm_wins_over_sigusr1(callback: PreemptionCheckpoint, sigusr1):
    callback.on_train_start(Trainer(), None)
    try:
        signal.raise_signal(signal.SIGUSR1)
        with pytest.raises(Preempted) as info:
            callback.on_train_batch_end(Trainer(received_sigterm=True), None, None, None, 0)
        assert info.value.code == 143 and callback.signum == signal.SIGTERM
    finally:
        callback.on_train_end(Trainer(), None)


@pytest.mark.parametrize("handler", [signal.SIG_IGN, "lightning"], ids=["SIG_IGN", "lightning"])
def test_a_sigusr1_handler_already_there_is_left_alone(callback: PreemptionCheckpoint, sigusr1, handler):
    def lightning(signum: int, frame: Any) -> None:  # Lightning's, under SLURM with auto-requeue
        pass

    handler = lightning if handler == "lightning" else handler
    signal.signal(signal.SIGUSR1, handler)
    callback.on_train_start(Trainer(), None)
    try:
        assert signal.getsignal(signal.SIGUSR1) is handler
    finally:
        callback.on_train_end(Trainer(), None)
    assert signal.getsignal(signal.SIGUSR1) is handler


def test_a_sigusr1_handler_not_set_from_python_counts_as_none(callback: PreemptionCheckpoint, sigusr1, monkeypatch):
    monkeypatch.setattr(preemption.signal, "getsignal", lambda signum: None)
    callback.on_train_start(Trainer(), None)
    monkeypatch.undo()
    try:
        assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None)
    finally:
        callback.on_train_end(Trainer(), None)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_no_handler_is_installed_from_another_thread(callback: PreemptionCheckpoint, sigusr1):
    errors: list[BaseException] = []

    def start() -> None:
        try:
            callback.on_train_start(Trainer(), None)
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    try:
        assert errors == [] and signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    finally:
        callback.on_train_end(Trainer(), None)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


# ---------------------------------------------------------------- several processes
def test_several_processes_reduce_the_signal_with_max_on_the_root_device(callback: PreemptionCheckpoint, ckpt: Path):
    trainer = Trainer(world_size=2, strategy=Strategy(others=int(signal.SIGTERM)))
    with pytest.raises(Preempted) as info:  # another process got SIGTERM: this one stops too
        callback.on_train_batch_end(trainer, None, None, None, 0)
    assert info.value.code == 143 and trainer.saved == [ckpt] and callback.saved == ckpt
    assert trainer.strategy.calls == [(torch.device("meta"), "max")]


def test_several_processes_send_their_own_signal_to_the_reduce(callback: PreemptionCheckpoint, monkeypatch):
    sent: list[Any] = []
    real = torch.tensor

    def tensor(data: Any, **kwargs: Any) -> torch.Tensor:
        sent.append((data, kwargs))
        return real(data, **kwargs)

    monkeypatch.setattr(preemption.torch, "tensor", tensor)
    trainer = Trainer(received_sigterm=True, world_size=3)
    callback.on_train_batch_end(trainer, None, None, None, 0)  # the stand-in's reduce answers 0: it decides
    monkeypatch.undo()
    assert sent[0] == (int(signal.SIGTERM), {"device": torch.device("meta")})  # then the stand-in's own
    assert trainer.saved == [] and callback.signum is None


def test_several_processes_without_a_signal_go_on(callback: PreemptionCheckpoint):
    trainer = Trainer(world_size=2)
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.saved == [] and len(trainer.strategy.calls) == 1 and callback.signum is None


# ---------------------------------------------------------------- on_exception
def test_on_exception_saves_a_single_process_fitting_run(callback: PreemptionCheckpoint, ckpt: Path):
    trainer = Trainer()
    callback.on_exception(trainer, None, SIGTERMException())
    assert trainer.saved == [ckpt] and callback.saved == ckpt and callback.signum == signal.SIGTERM


@pytest.mark.parametrize(
    "trainer",
    [
        Trainer(world_size=2),
        Trainer(state=SimpleNamespace(fn=TrainerFn.VALIDATING)),
        Trainer(sanity_checking=True),
    ],
    ids=["ddp", "validating", "sanity-check"],
)
def test_on_exception_only_records_sigterm_elsewhere(callback: PreemptionCheckpoint, trainer: Trainer):
    callback.on_exception(trainer, None, SIGTERMException())
    assert trainer.saved == [] and callback.saved is None and callback.signum == signal.SIGTERM


def test_on_exception_does_not_save_twice(callback: PreemptionCheckpoint, ckpt: Path, sigusr1):
    trainer = Trainer()
    callback.on_train_start(trainer, None)
    try:
        signal.raise_signal(signal.SIGUSR1)
        with pytest.raises(Preempted):
            callback.on_train_batch_end(trainer, None, None, None, 0)
    finally:
        callback.on_train_end(trainer, None)
    callback.on_exception(trainer, None, SIGTERMException())
    assert trainer.saved == [ckpt] and callback.signum == signal.SIGUSR1  # the first signal is kept


def test_on_exception_keeps_a_signal_already_recorded(callback: PreemptionCheckpoint):
    callback.signum = int(signal.SIGUSR1)  # its save failed
    trainer = Trainer(world_size=2)
    callback.on_exception(trainer, None, SIGTERMException())
    assert trainer.saved == [] and callback.signum == signal.SIGUSR1


def test_on_exception_ignores_other_exceptions(callback: PreemptionCheckpoint):
    trainer = Trainer()
    callback.on_exception(trainer, None, ValueError("not a signal"))
    assert trainer.saved == [] and callback.saved is None and callback.signum is None


# ---------------------------------------------------------------- preempted(): the message
def _continue(run_dir: Path) -> str:
    return f"\nContinue the run with:\n  attnkit train reverse --resume {shlex.quote(str(run_dir))}"


def test_preempted_after_a_save_names_it_and_the_command(callback: PreemptionCheckpoint, ckpt: Path, tmp_path: Path):
    run_dir = tmp_path / "run dir"
    callback.on_exception(Trainer(), None, SIGTERMException())
    exc = callback.preempted("reverse", run_dir, Trainer(global_step=41, current_epoch=3, is_global_zero=False))
    assert str(exc) == f"SIGTERM received: stopped at step 41, epoch 3; saved {ckpt}." + _continue(run_dir)
    assert "'" in _continue(run_dir)  # the space is quoted
    assert exc.code == 143 and exc.signum == signal.SIGTERM and exc.checkpoint == ckpt and exc.is_global_zero is False


def test_preempted_names_the_signal_received(callback: PreemptionCheckpoint, ckpt: Path, tmp_path: Path):
    callback._save(Trainer(), int(signal.SIGUSR1))
    exc = callback.preempted("reverse", tmp_path, Trainer())
    assert str(exc).startswith("SIGUSR1 received: stopped at step 7, epoch 2; saved ") and exc.code == 138
    assert exc.is_global_zero is True and exc.checkpoint == ckpt


def test_preempted_without_a_save_points_to_the_last_step_checkpoint(
    callback: PreemptionCheckpoint, ckpt: Path, tmp_path: Path
):
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"an older step checkpoint")
    callback.on_exception(Trainer(world_size=2), None, SIGTERMException())
    exc = callback.preempted("reverse", tmp_path, Trainer(global_step=5, current_epoch=0))
    assert str(exc) == (
        "SIGTERM received: stopped at step 5, epoch 0, where the processes could not save together; "
        f"{ckpt} holds the last step checkpoint." + _continue(tmp_path)
    )
    assert exc.code == 143 and exc.checkpoint == ckpt and exc.is_global_zero is True
    exc = callback.preempted("reverse", tmp_path, Trainer(is_global_zero=False))
    assert exc.is_global_zero is False


@pytest.mark.parametrize("global_zero", [True, False])
def test_preempted_before_any_checkpoint_says_start_again(
    callback: PreemptionCheckpoint, tmp_path: Path, global_zero: bool
):
    exc = callback.preempted("reverse", tmp_path, Trainer(global_step=0, current_epoch=1, is_global_zero=global_zero))
    # no signal recorded (Lightning stopped the run itself): SIGTERM
    assert str(exc) == "SIGTERM received: stopped at step 0, epoch 1 before any checkpoint was written; start again."
    assert exc.code == 143 and exc.signum == signal.SIGTERM and exc.checkpoint is None
    assert exc.is_global_zero is global_zero


def test_preempted_keeps_a_sigusr1_without_a_save(callback: PreemptionCheckpoint, tmp_path: Path):
    callback.signum = int(signal.SIGUSR1)
    exc = callback.preempted("reverse", tmp_path, Trainer())
    assert exc.code == 138 and str(exc).startswith("SIGUSR1 received: stopped at step 7, epoch 2 before any")
