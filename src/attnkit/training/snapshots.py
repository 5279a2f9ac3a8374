"""A training timeline: light copies of the model's weights every K optimiser steps
(``trainer.snapshot_every_n_steps``), to look inside the model at any point of its training.

A run trained with ``trainer.snapshot_every_n_steps=K`` keeps in ``<run>/snapshots/``:

* ``step-000000.pt``, ``step-00000K.pt``, ...: the weights after 0, K, 2K, ... optimiser steps, and after the
  last one (the trained weights): ``{"step": int, "lora": bool, "state_dict": {...}}``, the model's state dict
  only (no optimiser state), in the run's dtype, on the CPU. A LoRA run keeps its adapter weights (and
  ``train_modules``), not the frozen base: load them into the run's model (:func:`load_snapshot`).
* ``index.json``: ``{"every_n_steps": K, "snapshots": [{"step", "file", "loss", "lora"}, ...]}``,
  sorted by step. ``loss`` is the training loss computed with the snapshot's weights: that of the optimiser step taken
  from them (the mean of its accumulated batches, on global rank 0); ``null`` for the last snapshot, from which
  no step was taken.

Files are written atomically (as the checkpoints), by global rank 0 only. A resumed run keeps the snapshots it
has and adds those of the steps it has not (never one step twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from attnkit.errors import CheckpointError
from attnkit.models.lora import is_lora, lora_state_keys
from attnkit.training.checkpoint import load_checkpoint_file, write_atomic, write_json_atomic

__all__ = [
    "SNAPSHOT_DIR",
    "WeightSnapshots",
    "load_snapshot",
    "read_snapshot_index",
    "snapshot_state",
]

SNAPSHOT_DIR = "snapshots"
INDEX = "index.json"


def snapshot_state(model: nn.Module) -> dict[str, Tensor]:
    """What a snapshot keeps of ``model``: its state dict (a LoRA model's trainable tensors only), copied to
    the CPU in its own dtype."""
    state = model.state_dict()
    if is_lora(model):
        keep = set(lora_state_keys(model))
        state = {k: v for k, v in state.items() if k in keep}
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def read_snapshot_index(run_dir: str | Path) -> list[dict[str, Any]]:
    """The snapshots of the run at ``run_dir`` (``index.json``'s entries, by step); ``[]`` when it has none."""
    path = Path(run_dir) / SNAPSHOT_DIR / INDEX
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["snapshots"]
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path} is not a snapshot index ({type(err).__name__}: {err}); remove it") from err
    return sorted(entries, key=lambda e: int(e["step"]))


def load_snapshot(model: nn.Module, run_dir: str | Path, entry: dict[str, Any]) -> None:
    """Load the snapshot ``entry`` (from :func:`read_snapshot_index`) of the run at ``run_dir`` into ``model``
    (the run's model): all of its weights, or a LoRA run's adapters (``model`` then is the run's model with its
    adapters unmerged: :func:`attnkit.tasks.load_run`'s, not :func:`attnkit.tasks.load_model`'s)."""
    path = Path(run_dir) / SNAPSHOT_DIR / str(entry["file"])
    data = load_checkpoint_file(path)
    state = data.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} is not a weight snapshot (no state_dict)")
    result = model.load_state_dict(state, strict=not data.get("lora", False))
    if result.unexpected_keys:
        raise CheckpointError(f"{path} does not fit the run's model: unexpected weights {result.unexpected_keys[:5]}")


class WeightSnapshots(Callback):
    """Keep the model's weights every ``every_n_steps`` optimiser steps, at step 0 and at the end of training,
    in ``folder() / "snapshots"`` (``folder``: the run folder, known once the processes agree on it)."""

    def __init__(self, folder: Callable[[], Path], every_n_steps: int) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"trainer.snapshot_every_n_steps must be a positive integer, got {every_n_steps!r}")
        self.folder = folder
        self.every_n_steps = every_n_steps
        self.entries: dict[int, dict[str, Any]] = {}
        self.pending: int | None = None  # the step whose snapshot is written and whose loss is being summed
        self.losses: list[float] = []

    @property
    def path(self) -> Path:
        return Path(self.folder()) / SNAPSHOT_DIR

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:  # a resumed run keeps what it has
            self.entries = {int(e["step"]): e for e in read_snapshot_index(self.folder())}

    def _save(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int) -> None:
        model = getattr(pl_module, "model", pl_module)
        lora = is_lora(model)
        data = {"step": step, "lora": lora, "state_dict": snapshot_state(model)}
        name = f"step-{step:06d}.pt"
        write_atomic(self.path / name, lambda tmp: torch.save(data, tmp))
        self.entries[step] = {"step": step, "file": name, "loss": None, "lora": lora}

    def _write_index(self) -> None:
        entries = [self.entries[s] for s in sorted(self.entries)]
        write_json_atomic(self.path / INDEX, {"every_n_steps": self.every_n_steps, "snapshots": entries})

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step  # the weights this batch is computed with: after `step` optimiser steps
        if not trainer.is_global_zero or self.pending is not None or step % self.every_n_steps:
            return
        if step in self.entries:
            return
        self._save(trainer, pl_module, step)
        self.pending, self.losses = step, []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.pending is None:
            return
        loss = getattr(pl_module, "last_train_loss", None)  # TaskModule's; else the step's output, unscaled
        if loss is None and isinstance(outputs, dict) and trainer.accumulate_grad_batches == 1:
            loss = outputs.get("loss")
        if loss is not None:
            self.losses.append(float(loss))
        if trainer.global_step != self.pending:  # the step taken from the snapshot's weights is done
            self.entries[self.pending]["loss"] = sum(self.losses) / len(self.losses) if self.losses else None
            self.pending = None
            self._write_index()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        self.pending = None
        step = trainer.global_step
        if step not in self.entries:
            self._save(trainer, pl_module, step)
        self._write_index()
