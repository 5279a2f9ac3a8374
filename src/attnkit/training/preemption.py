"""Preemption: a run stopped by SIGTERM (or SIGUSR1) saves ``last.ckpt`` at once and says how to continue.

Lightning notes a SIGTERM itself (:attr:`lightning.pytorch.Trainer.received_sigterm`) and stops at
the end of the batch; under SLURM with auto-requeue (Lightning's
:class:`~lightning.pytorch.plugins.environments.SLURMEnvironment`) it also answers SIGUSR1 by saving
an ``hpc_ckpt_*.ckpt`` and requeuing the job. :class:`PreemptionCheckpoint` adds what a run needs
to continue: at the end of the batch during which the signal came, every process of the run saves
``last.ckpt`` together (written atomically by global rank 0), then :class:`Preempted` (a
``SystemExit`` with code ``128 + signal``: 143 for SIGTERM, 138 for SIGUSR1) stops them all.
"""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from attnkit.errors import Preempted

__all__ = ["Preempted", "PreemptionCheckpoint"]


class PreemptionCheckpoint(Callback):
    """Save ``checkpoint()`` (the run's ``last.ckpt``) and stop the run when a process of it gets SIGTERM, or
    SIGUSR1 when Lightning does not handle that one itself (it does under SLURM with auto-requeue).

    The decision is taken at the end of a training batch, the place Lightning's own checkpoints are
    written from (so a resumed run continues with the next batch); with several processes the
    signal of any one counts for all (one all-reduce per batch), so all of them reach
    ``trainer.save_checkpoint`` at the same batch. A signal during validation or between epochs
    stops the run where Lightning stops it; a single-process run saves there too.
    """

    def __init__(self, checkpoint: Callable[[], Path]) -> None:
        self.checkpoint = checkpoint  # where last.ckpt goes (known once the processes agree on the run folder)
        self._sigusr1_received = False
        self._previous: Any = None
        self.signum: int | None = None  # the signal that stopped the run
        self.saved: Path | None = None

    # ---------------------------------------------------------------- signals
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After Lightning has set its handlers: SIGUSR1 is ours only when Lightning has none for it
        # (it has one under SLURM with auto-requeue, which saves and requeues instead).
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            self._previous = signal.signal(signal.SIGUSR1, self._on_sigusr1)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)
            self._previous = None

    def _on_sigusr1(self, signum: int, frame: Any) -> None:
        self._sigusr1_received = True

    def _received(self, trainer: L.Trainer) -> int:
        if trainer.received_sigterm:
            return int(signal.SIGTERM)
        return int(signal.SIGUSR1) if self._sigusr1_received else 0

    # ---------------------------------------------------------------- saving
    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        signum = self._received(trainer)
        if trainer.world_size > 1:  # any process's signal stops them all, at this same batch
            signum = int(
                trainer.strategy.reduce(torch.tensor(signum, device=trainer.strategy.root_device), reduce_op="max")
            )
        if signum:
            self._save(trainer, signum)
            raise Preempted(signum, self.saved, "stopped by a signal", is_global_zero=trainer.is_global_zero)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # Lightning stopped outside a training batch (validation, epoch end). Only a single process
        # may save here: the processes of a multi-process run need not all be at this point.
        if (
            isinstance(exception, SIGTERMException)
            and self.saved is None
            and trainer.world_size == 1
            and trainer.state.fn == TrainerFn.FITTING
            and not trainer.sanity_checking
        ):
            self._save(trainer, int(signal.SIGTERM))
        elif isinstance(exception, SIGTERMException) and self.signum is None:
            self.signum = int(signal.SIGTERM)

    def _save(self, trainer: L.Trainer, signum: int) -> None:
        self.signum = signum
        path = self.checkpoint()
        trainer.save_checkpoint(path)
        self.saved = path

    def preempted(self, task: str, run_dir: Path, trainer: L.Trainer) -> Preempted:
        """The exception that ends a run stopped by a signal, with the command that continues it."""
        signum = self.signum or int(signal.SIGTERM)
        name = signal.Signals(signum).name
        command = f"attnkit train {task} --resume {shlex.quote(str(run_dir))}"
        where = f"step {trainer.global_step}, epoch {trainer.current_epoch}"
        if self.saved is not None:
            text = f"{name} received: stopped at {where}; saved {self.saved}."
        elif self.checkpoint().is_file():
            text = (
                f"{name} received: stopped at {where}, where the processes could not save together; "
                f"{self.checkpoint()} holds the last step checkpoint."
            )
        else:
            return Preempted(
                signum, None, f"{name} received: stopped at {where} before any checkpoint was written; start again.",
                is_global_zero=trainer.is_global_zero,
            )  # fmt: skip
        message = f"{text}\nContinue the run with:\n  {command}"
        return Preempted(signum, self.checkpoint(), message, is_global_zero=trainer.is_global_zero)
