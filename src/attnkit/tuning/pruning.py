"""What a trial reports while it trains: the monitored metric to the pruner after every epoch, and a
non-finite loss or metric as a failed trial."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import optuna
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

__all__ = ["PruningCallback", "TrialFailed"]


class TrialFailed(RuntimeError):
    """A trial that cannot give a result (non-finite loss or metric); recorded as failed with this reason."""


class PruningCallback(Callback):
    """Reports the monitored validation metric to an Optuna trial after every validation epoch, and
    stops the run with :class:`optuna.TrialPruned` when the study's pruner says so.

    A non-finite training loss raises :class:`TrialFailed` at once (the trial is recorded as failed
    with the step and the value), rather than training on NaNs to the end.
    """

    def __init__(self, trial: optuna.Trial, monitor: str) -> None:
        self.trial = trial
        self.monitor = monitor

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            raise TrialFailed(
                f"training loss became {float(loss.detach().float().mean())} at step {trainer.global_step} "
                f"(epoch {trainer.current_epoch + 1}); the learning rate is probably too high"
            )

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return  # not the sanity check, nor the final validation of the best checkpoint
        epoch = trainer.current_epoch
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            logged = ", ".join(sorted(trainer.callback_metrics)) or "nothing"
            raise TrialFailed(f"the task logged no {self.monitor} at validation (logged: {logged})")
        score = float(value)
        if not math.isfinite(score):
            raise TrialFailed(f"{self.monitor} is {score} after epoch {epoch + 1}")
        self.trial.report(score, step=epoch)
        last = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        if not last and self.trial.should_prune():  # a run that has trained to the end is complete
            raise optuna.TrialPruned(f"stopped after epoch {epoch + 1} by the pruner: {self.monitor} {score:.4f}")
