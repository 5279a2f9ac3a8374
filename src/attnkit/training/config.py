"""Training configuration sections shared by every task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from attnkit.config import StrictModel
from attnkit.training.trackers import TRACKERS

if TYPE_CHECKING:
    LoggerName = str
else:
    LoggerName = Literal[TRACKERS.names()]

__all__ = ["OptimConfig", "TrainerConfig"]


class OptimConfig(StrictModel):
    """Optimiser and learning-rate schedule."""

    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = Field(5e-4, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    warmup: int = Field(50, ge=0, description="linear warm-up, in optimiser steps")
    max_iters: int | None = Field(
        None, gt=0, description="cosine period in optimiser steps; default the run's (epochs x steps per epoch)"
    )
    gradient_clip_val: float | None = Field(5.0, gt=0.0, description="clip the gradient norm; null to disable")


class TrainerConfig(StrictModel):
    """What Lightning's Trainer is given, plus batch size and checkpointing."""

    max_epochs: int = Field(10, gt=0)
    batch_size: int = Field(128, gt=0)
    accelerator: str = "auto"
    devices: int | str = Field("auto", description="devices (processes) per machine")
    num_nodes: int = Field(1, gt=0, description="machines; each starts its processes itself (torchrun, SLURM)")
    strategy: str = Field(
        "auto", description="Lightning's strategy (auto, ddp, ...) or fsdp: each process holds a shard of the model"
    )
    precision: str = "32-true"
    accumulate_grad_batches: int = Field(1, gt=0, description="batches whose gradients make one optimiser step")
    activation_checkpointing: bool = Field(
        False, description="recompute each transformer block in backward instead of keeping its activations"
    )
    num_workers: int = Field(0, ge=0, description="data loader worker processes")
    threads: int | None = Field(None, gt=0, description="torch threads per process (1 is best on a busy machine)")
    early_stopping_patience: int | None = Field(None, gt=0, description="epochs without improvement before stopping")
    checkpoint_every_n_steps: int | None = Field(
        200, gt=0, description="also write last.ckpt every N steps, so a killed run resumes mid-epoch"
    )
    snapshot_every_n_steps: int | None = Field(
        None,
        gt=0,
        strict=True,
        description="keep a copy of the model's weights every N optimiser steps (and at step 0 and the end) in "
        "<run>/snapshots/, for `attnkit inspect over-training`; null: none",
    )
    log_every_n_steps: int = Field(50, gt=0)
    limit_train_batches: int | float | None = Field(None, gt=0)
    deterministic: bool = False
    compile: bool = Field(False, description="torch.compile the model before training (checkpoints stay the same)")
    progress_bar: bool = True
    report: bool = Field(True, description="write report.html into the run folder when training ends")
    loggers: list[LoggerName] = Field(
        ["tensorboard", "csv"],
        description=f"where the run is logged, any of {', '.join(TRACKERS.names())} (see docs/trackers.md)",
    )
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI (http://host:5000, sqlite:///file.db) or a folder; "
        "default $MLFLOW_TRACKING_URI, else <output_dir>/mlflow",
    )
    mlflow_experiment: str | None = Field(None, min_length=1, description="MLflow experiment; default the task's name")
    mlflow_tags: dict[str, str] = Field({}, description="tags of the MLflow run")
    wandb_project: str | None = Field(
        None, min_length=1, description="W&B project; default $WANDB_PROJECT, else attnkit (offline unless $WANDB_MODE)"
    )
    wandb_group: str | None = Field(None, min_length=1, description="W&B group of the run (a study's trials share one)")

    @model_validator(mode="after")
    def _check_snapshots(self) -> TrainerConfig:
        if self.snapshot_every_n_steps is not None and self.strategy == "fsdp":
            raise ValueError(
                "trainer.snapshot_every_n_steps does not work with trainer.strategy=fsdp (each process holds only a "
                "shard of the weights): use trainer.strategy=ddp, or snapshot_every_n_steps=null"
            )
        return self

    @field_validator("loggers")
    @classmethod
    def _check_loggers(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(f"give at least one logger, from {', '.join(TRACKERS.names())}")
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named more than once; name each logger once")
        return value
