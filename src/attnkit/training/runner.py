"""Running tasks: train (and resume), evaluate and load runs.

A run lives in ``<output_dir>/<task>/<run-id>/``: ``config.yaml`` (the resolved config),
``checkpoints/best.ckpt`` and ``last.ckpt``, ``logs/`` (TensorBoard and CSV) and
``metrics.json`` (final validation and test figures).
"""

from __future__ import annotations

import logging
import os
import shlex
import time
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from attnkit.config import ConfigError, merge, validate_config
from attnkit.models.lora import is_lora
from attnkit.training.checkpoint import AtomicCheckpointIO, CheckpointError, load_checkpoint_file, write_json_atomic
from attnkit.training.model_folders import load_model_folder
from attnkit.training.module import TaskModule
from attnkit.training.preemption import Preempted, PreemptionCheckpoint
from attnkit.training.resolve import ResolvedModel, resolve_model
from attnkit.training.sharding import set_activation_checkpointing, sharding_plan, strategy_for
from attnkit.training.snapshots import WeightSnapshots
from attnkit.training.task import C, LoadedRun, Task, TaskConfig
from attnkit.training.trackers import Trackers, check_trackers
from attnkit.training.watchdog import StopWatchdog
from attnkit.version import __version__

__all__ = ["LoadedRun", "TrainResult", "build_module", "evaluate", "fit", "load_run"]


@dataclass
class TrainResult:
    """What :func:`fit` returns: the trained module (best checkpoint), its model, the metrics and the run folder."""

    module: TaskModule
    metrics: dict[str, float]
    run_dir: Path
    wall_time_s: float = 0.0
    best_checkpoint: Path | None = None
    # Whether this process is the first of the run (global rank 0): the one that writes its files.
    is_global_zero: bool = True

    @property
    def model(self) -> torch.nn.Module:
        return self.module.model


class StepCheckpoint(Callback):
    """Write ``last.ckpt`` every ``every_n_steps`` optimiser steps, so a killed run loses little."""

    def __init__(self, folder: RunFolder, every_n_steps: int) -> None:
        self.folder = folder
        self.every_n_steps = every_n_steps
        self.saved_step = -1

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        step = trainer.global_step  # optimiser steps: the same over a step's accumulated batches
        if step > 0 and step % self.every_n_steps == 0 and step != self.saved_step:
            self.saved_step = step
            trainer.save_checkpoint(self.folder.last_checkpoint)


def _quiet_lightning() -> None:
    """Keep Lightning's start-up chatter (tips, device lines, checkpoint notes) out of the user's way."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.trainer.connectors.checkpoint_connector"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    warnings.filterwarnings("ignore", message=r".*'set_vital' is deprecated.*")  # torchdata's loader
    warnings.filterwarnings(
        "ignore", message=r".*The number of training batches .* is smaller than the logging interval.*"
    )


class RunFolder(Callback):
    """Agrees on the run folder and writes its ``config.yaml``, once the processes of a run can talk.

    Each process of a multi-process run (Lightning's DDP launcher, or ``torchrun`` on several
    machines, where every machine starts on its own) picks a folder name; the first process's
    choice is broadcast to the others when the process group exists (``setup``), and only that
    process (global rank 0) creates the folder and writes ``config.yaml``.
    """

    def __init__(self, path: Path, cfg: TaskConfig) -> None:
        self.path = path
        self.cfg = cfg

    @property
    def last_checkpoint(self) -> Path:
        return self.path / "checkpoints" / "last.ckpt"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.path = Path(trainer.strategy.broadcast(str(self.path), src=0))
        if trainer.is_global_zero:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "config.yaml").write_text(yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))


def _slurm_requeued() -> bool:
    """Whether this process belongs to a SLURM job that was requeued (and reruns its command)."""
    return SLURMEnvironment.detect() and int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


def _new_run_dir(task: Task[Any], cfg: TaskConfig) -> tuple[Path, bool]:
    """The folder of a new run, and whether it is one to continue instead: a SLURM job requeued
    after a preemption reruns its command, and finds its run (named after the job) there."""
    root = Path(cfg.output_dir) / task.name
    name = cfg.name
    if name is None and SLURMEnvironment.detect():
        name = f"slurm-{SLURMEnvironment.job_id()}"  # the same on every node, and after a requeue
    if name is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir, suffix = root / stamp, 1
        while run_dir.exists():
            suffix += 1
            run_dir = root / f"{stamp}-{suffix}"
        return run_dir, False
    run_dir = root / name
    if (run_dir / "checkpoints").exists():
        if _slurm_requeued() and (run_dir / "checkpoints" / "last.ckpt").is_file():
            return run_dir, True
        raise ConfigError(
            f"run folder {run_dir} already exists: choose another name, or continue it with --resume {run_dir}"
        )
    return run_dir, False


def _trainer(cfg: TaskConfig, run_dir: Path, *, callbacks: list[Callback], logger: Any) -> L.Trainer:
    t = cfg.trainer
    if t.progress_bar:
        # The same bar whatever else is installed (Lightning picks Rich when it happens to be
        # there), redrawn every 10 batches: redrawing every batch costs ~0.5 ms, a tenth of a
        # small model's training step.
        callbacks = [*callbacks, TQDMProgressBar(refresh_rate=10)]
    return L.Trainer(
        default_root_dir=run_dir,
        max_epochs=t.max_epochs,
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=strategy_for(t),
        precision=t.precision,  # type: ignore[arg-type]  # a str Lightning checks; its stub wants one of its Literals
        gradient_clip_val=cfg.optim.gradient_clip_val,
        accumulate_grad_batches=t.accumulate_grad_batches,
        log_every_n_steps=t.log_every_n_steps,
        limit_train_batches=t.limit_train_batches,
        deterministic=t.deterministic,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        callbacks=callbacks,
        logger=logger,
        plugins=[AtomicCheckpointIO()],
        # The data modules shard their own data across processes (attnkit.data.base): Lightning's
        # DistributedSampler cannot wrap a batch sampler, and it repeats evaluation examples.
        use_distributed_sampler=False,
    )


def build_module(task: Task[C], cfg: C, datamodule: Any, *, init_weights: bool = True) -> TaskModule:
    """The module a new run of ``task`` trains, once ``datamodule`` is set up: its model from
    :meth:`Task.model_spec`, every hyper-parameter a checkpoint needs to rebuild it, and (with
    ``init_weights``) its starting weights from :meth:`Task.init_weights` (e.g. pretrained ones)."""
    spec = task.model_spec(cfg, datamodule)
    artifacts = datamodule.artifacts() if hasattr(datamodule, "artifacts") else {}
    module = task.module_class()(
        task=task.name,
        config=cfg.model_dump(mode="json"),
        model={"name": spec.name, "config": spec.config},
        artifacts=artifacts,
        num_classes=spec.num_classes,
        attnkit_version=__version__,
    )
    if init_weights:
        task.init_weights(module, cfg)
    return module


def _stop_watchdog(trainer: L.Trainer, hint: Callable[[], str] | None = None) -> AbstractContextManager[Any]:
    """For a multi-process run, a :class:`StopWatchdog` that ends this process (and the processes it
    started) when a SIGTERM cannot stop it: a process stuck in a collective never runs Lightning's handler."""
    if trainer.world_size < 2:
        return nullcontext()
    launcher = trainer.strategy.launcher  # global rank 0's starts the machine's other processes
    kill = launcher.kill if launcher is not None else None
    return StopWatchdog(lambda: trainer.received_sigterm, kill_children=kill, hint=hint)


def _resume_hint(task: str, folder: RunFolder) -> str:
    """Where a stopped run's last checkpoint is and how to continue it, for :func:`_stop_watchdog`."""
    if not folder.last_checkpoint.is_file():
        return "No checkpoint had been written."
    resume = f"attnkit train {task} --resume {shlex.quote(str(folder.path))}"
    return f"{folder.last_checkpoint} holds its last checkpoint; continue the run with:\n  {resume}"


def _check_sharding(cfg: TaskConfig) -> None:
    """Refuse, before any data is read, settings ``trainer.strategy=fsdp`` cannot train with."""
    if sharding_plan(cfg.trainer) is not None and getattr(getattr(cfg, "model", None), "lora", None):
        raise ConfigError(
            "trainer.strategy=fsdp does not train LoRA adapters (model.lora: their checkpoints keep only the "
            "adapters): use trainer.strategy=ddp, or train without model.lora"
        )


def _prepare_training(module: TaskModule, cfg: TaskConfig) -> None:
    """What ``trainer.strategy=fsdp`` and ``trainer.activation_checkpointing`` set on a module to train."""
    module.sharding = sharding_plan(cfg.trainer)
    set_activation_checkpointing(module.model, cfg.trainer.activation_checkpointing)


def fit(
    task: Task[Any],
    cfg: TaskConfig,
    *,
    resume: str | Path | None = None,
    callbacks: list[Callback] | None = None,
    run_dir: str | Path | None = None,
) -> TrainResult:
    """Train ``task`` with ``cfg``; with ``resume`` (a run folder) continue from its ``last.ckpt``.

    ``callbacks`` are extra Lightning callbacks (e.g. a tuning study's pruning callback); ``run_dir``
    places a new run in that folder instead of ``<output_dir>/<task>/<name>``.
    """
    start = time.perf_counter()
    _quiet_lightning()
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    _check_sharding(cfg)
    check_trackers(cfg)  # a tracker whose package is missing, before any data is read

    ckpt_path: Path | None = None
    if resume is None and run_dir is None:
        run_dir, continuing = _new_run_dir(task, cfg)
        resume = run_dir if continuing else None
    if resume is not None:
        run_dir = Path(resume)
        ckpt_path = run_dir / "checkpoints" / "last.ckpt"
        if not ckpt_path.is_file():
            raise CheckpointError(f"cannot resume {run_dir}: it has no checkpoints/last.ckpt")
        saved = load_checkpoint_file(ckpt_path)
        _check_task(saved, task, ckpt_path)
        for stale in ckpt_path.parent.glob(".*.tmp"):  # left by a process killed while writing
            stale.unlink(missing_ok=True)
    assert run_dir is not None
    run_dir = Path(run_dir)

    datamodule = task.build_datamodule(cfg)
    datamodule.setup("fit")
    module = build_module(task, cfg, datamodule, init_weights=ckpt_path is None)  # a resumed run has its weights
    _prepare_training(module, cfg)
    if cfg.trainer.compile:
        # In place: the module's state_dict keys stay those of the plain model (no `_orig_mod.`).
        module.model.compile()
    if ckpt_path is not None and is_lora(module.model):
        load_lora_base(task, module, cfg, ckpt_path)  # but a LoRA run's checkpoints hold only its adapters

    folder = RunFolder(run_dir, cfg)
    ckpt_dir = run_dir / "checkpoints"
    best = ModelCheckpoint(
        dirpath=ckpt_dir,
        filename="best",
        monitor=task.monitor[0],
        mode=task.monitor[1],
        save_top_k=1,
        enable_version_counter=False,
        auto_insert_metric_name=False,
    )
    # last.ckpt: the newest state at every evaluation (Lightning's save_last copies only a checkpoint that beat
    # the best, so a run whose last epochs did not improve kept an older last.ckpt, and resuming it lost them).
    latest = ModelCheckpoint(dirpath=ckpt_dir, filename="last", enable_version_counter=False)
    preemption = PreemptionCheckpoint(lambda: folder.last_checkpoint)
    callbacks = [folder, best, latest, LearningRateMonitor(logging_interval="step"), *(callbacks or [])]
    if cfg.trainer.checkpoint_every_n_steps:
        callbacks.append(StepCheckpoint(folder, cfg.trainer.checkpoint_every_n_steps))
    if cfg.trainer.snapshot_every_n_steps:  # the weights every K steps, for the training timeline
        callbacks.append(WeightSnapshots(lambda: folder.path, cfg.trainer.snapshot_every_n_steps))
    callbacks.append(preemption)  # after the step checkpoint: a signal's checkpoint is the newest
    if cfg.trainer.early_stopping_patience:
        monitor, mode = task.monitor
        callbacks.append(EarlyStopping(monitor=monitor, mode=mode, patience=cfg.trainer.early_stopping_patience))
    trackers = Trackers(cfg, run_dir, task.name, resume=ckpt_path is not None)  # trainer.loggers
    callbacks.append(trackers.callback)
    trainer = _trainer(cfg, run_dir, callbacks=callbacks, logger=trackers.loggers)
    with _stop_watchdog(trainer, lambda: _resume_hint(task.name, folder)):
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        except (Preempted, SIGTERMException) as stop:
            raise preemption.preempted(task.name, folder.path, trainer) from stop
        run_dir = folder.path  # the first process's choice, on every process

        best_path = Path(best.best_model_path) if best.best_model_path else ckpt_dir / "last.ckpt"
        kwargs: dict[str, Any] = dict(datamodule=datamodule, ckpt_path=str(best_path), verbose=False, weights_only=True)
        val = trainer.validate(module, **kwargs)
        test = trainer.test(module, **kwargs)
    metrics = {**(val[0] if val else {}), **(test[0] if test else {})}
    metrics = {k: float(v) for k, v in metrics.items() if not k.endswith("_epoch")}
    wall = time.perf_counter() - start
    if trainer.is_global_zero:
        write_json_atomic(
            run_dir / "metrics.json",
            {"task": task.name, "metrics": metrics, "best_checkpoint": str(best_path), "epochs": trainer.current_epoch},
        )
        trackers.finish(run_dir)  # config.yaml and metrics.json to the trackers; trackers.json
    return TrainResult(
        module=module,
        metrics=metrics,
        run_dir=run_dir,
        wall_time_s=wall,
        best_checkpoint=best_path,
        is_global_zero=trainer.is_global_zero,
    )


def _check_task(checkpoint: dict[str, Any], task: Task[Any] | None, path: Path) -> dict[str, Any]:
    hparams = checkpoint.get("hyper_parameters")
    ok = isinstance(hparams, dict) and isinstance(hparams.get("task"), str) and isinstance(hparams.get("config"), dict)
    if not ok or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not an attnkit checkpoint (no attnkit hyper-parameters or weights)")
    assert isinstance(hparams, dict)  # ok says so
    if task is not None and hparams["task"] != task.name:
        raise CheckpointError(f"{path} is a checkpoint of task {hparams['task']!r}, not {task.name!r}")
    major = str(hparams.get("attnkit_version", "0")).split(".")[0]
    if major != __version__.split(".")[0]:
        raise CheckpointError(
            f"{path} was written by attnkit {hparams.get('attnkit_version')}, incompatible with {__version__}"
        )
    return hparams


def load_run(path: str | Path | ResolvedModel, tasks: Task[Any] | Mapping[str, Task[Any]]) -> LoadedRun:
    """Rebuild a trained module from a run folder or checkpoint file alone, or from a model folder
    (:mod:`attnkit.training.model_folders`): whatever :func:`~attnkit.training.resolve.resolve_model`
    finds at ``path``.

    ``tasks``: the task the run must be of, or the tasks it may be of by name (a registry such as
    :data:`attnkit.tasks.TASKS`; :func:`attnkit.tasks.load_run` passes that one).
    """
    resolved = resolve_model(path)
    if resolved.is_model_folder:
        return load_model_folder(resolved, tasks)
    ckpt, run_dir = resolved.checkpoint, resolved.run_dir
    assert ckpt is not None  # a run's is always found
    checkpoint = load_checkpoint_file(ckpt)
    hparams = _check_task(checkpoint, None, ckpt)
    name = hparams["task"]
    if isinstance(tasks, Task):
        if name != tasks.name:
            raise CheckpointError(
                f"{ckpt} is a run of task {name!r}; this needs a run of task {tasks.name!r} "
                "(use `attnkit predict` for other tasks)"
            )
        task = tasks
    elif name in tasks:
        task = tasks[name]
    else:
        raise CheckpointError(f"{ckpt} is a run of task {name!r}, which is not one of the tasks {sorted(tasks)}")
    cfg = task.config(hparams["config"], source=f"config stored in {ckpt}")
    try:
        module = task.module_class()(**hparams)
        if is_lora(module.model):
            load_lora_base(task, module, cfg, ckpt)
        module.on_load_checkpoint(checkpoint)
        module.load_state_dict(checkpoint["state_dict"])
    except CheckpointError:
        raise
    except (RuntimeError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{ckpt} does not fit the model it describes: {err}") from err
    module.eval()
    return LoadedRun(task=task, config=cfg, module=module, checkpoint=ckpt, run_dir=run_dir, hparams=hparams)


def load_lora_base(task: Task[Any], module: TaskModule, cfg: Any, checkpoint: Path) -> None:
    """Load the frozen base of a LoRA run into ``module`` (its checkpoints hold only the adapters)."""
    try:
        task.init_weights(module, cfg)
    except (FileNotFoundError, ValueError, CheckpointError) as err:
        init = getattr(getattr(cfg, "model", None), "init", None)
        raise CheckpointError(
            f"{checkpoint} holds LoRA adapters trained on the base model.init={init!r}, which cannot be loaded: {err}"
        ) from err


def evaluate(
    run: LoadedRun, datamodule: L.LightningDataModule | None = None, trainer: dict[str, Any] | None = None
) -> dict[str, float]:
    """Test a trained run (:func:`load_run`) on its task's test split, or on the test split of
    ``datamodule``; returns the test metrics.

    ``trainer``: overrides of the run's ``trainer`` section (e.g. ``{"devices": 1, "strategy":
    "auto"}`` to test a multi-process run in one process).
    """
    _quiet_lightning()
    cfg = run.config
    if trainer:
        data = merge(cfg.model_dump(mode="json"), {"trainer": trainer})
        cfg = validate_config(run.task.config_cls, data, source="trainer overrides")
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    if datamodule is None:
        datamodule = run.task.build_datamodule(cfg, artifacts=run.hparams.get("artifacts"))
    run.module.sharding = sharding_plan(cfg.trainer)
    trainer_ = _trainer(cfg, Path(run.run_dir or "."), callbacks=[], logger=False)
    with _stop_watchdog(trainer_):
        result = trainer_.test(run.module, datamodule=datamodule, verbose=False)
    return {k: float(v) for k, v in (result[0] if result else {}).items()}
