"""The trial loop of a study: each process (the ``tune`` process itself, or one of its ``--workers``)
asks the study for trials and trains them until the study has its ``n_trials``.

A trial's sampled keys are applied to the study's base config; a combination the config rejects is
recorded as pruned ("rejected", never trained); a trial that raises is recorded as failed with its
reason, and the loop goes on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from attnkit.config import expand_dotted, merge
from attnkit.errors import ConfigError
from attnkit.tasks import build_config, get_task
from attnkit.training.runner import fit
from attnkit.training.trackers import mark_stopped
from attnkit.tuning.progress import describe, log
from attnkit.tuning.pruning import PruningCallback, TrialFailed
from attnkit.tuning.space import SearchSpace, load_space
from attnkit.tuning.storage import open_storage
from attnkit.tuning.trials import counts_toward_budget

__all__ = [
    "MAX_REJECTED_IN_A_ROW",
    "PRUNERS",
    "SAMPLERS",
    "WorkerSpec",
    "default_startup_trials",
    "make_pruner",
    "make_sampler",
    "quiet_optuna",
    "run_worker",
    "trial_trainer",
    "worker_main",
]

SAMPLERS = ("tpe", "random", "gp")
PRUNERS = ("median", "hyperband", "none")
MAX_REJECTED_IN_A_ROW = 50


def make_sampler(name: str | optuna.samplers.BaseSampler, seed: int, startup: int) -> optuna.samplers.BaseSampler:
    if isinstance(name, optuna.samplers.BaseSampler):
        return name
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        # Kriging: a Gaussian-process surrogate (Matern kernel; categorical keys by Hamming distance)
        # and log expected improvement. Keys it cannot model jointly are drawn at random.
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    raise ConfigError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)} (or pass an Optuna sampler)")


def make_pruner(
    name: str | optuna.pruners.BasePruner | None, startup: int, max_epochs: int | None
) -> optuna.pruners.BasePruner:
    if isinstance(name, optuna.pruners.BasePruner):
        return name
    if name in (None, "none"):
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_epochs or "auto", reduction_factor=3)
    raise ConfigError(f"unknown pruner {name!r}; choose one of {', '.join(PRUNERS)} (or pass an Optuna pruner)")


def default_startup_trials(n_trials: int) -> int:
    """Random trials before TPE models the results (and before the median pruner prunes): n/4 in [3, 10]."""
    return max(3, min(10, n_trials // 4))


@dataclass
class WorkerSpec:
    """Everything a worker process needs (plain data: it is passed to ``python -m`` workers as JSON)."""

    task: str
    base: dict[str, Any]
    space: dict[str, Any]
    storage: str
    study_name: str
    study_dir: str
    n_trials: int
    deadline: float | None  # time.time() after which no trial starts
    sampler: str
    pruner: str | None  # None: no pruning
    seed: int
    startup_trials: int
    heartbeat: int
    worker: int = 0
    verbose: bool = True
    parent_pid: int | None = None
    # Trainer keys every trial's run gets from the study (its trackers: the MLflow parent run, the W&B group).
    trial_trainer: dict[str, Any] | None = None


def quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    for message in (r".*does not have many workers.*", r".*GPU available.*", r".*TPU available.*"):
        warnings.filterwarnings("ignore", message=message)


def _reason(err: BaseException) -> str:
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return f"out of memory: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    if isinstance(err, TrialFailed):
        return str(err)
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _objective(spec: WorkerSpec, space: SearchSpace, monitor: str) -> Callable[[optuna.Trial], float]:
    task = get_task(spec.task)
    study_dir = Path(spec.study_dir)

    def objective(trial: optuna.Trial) -> float:
        # Workers that asked for a trial at the same time as others may be over the budget: the trial
        # numbers decide who runs (lower first) and the others step back without training.
        ahead = sum(
            1
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and (counts_toward_budget(t) or t.state == TrialState.RUNNING)
        )
        if ahead >= spec.n_trials:
            trial.set_user_attr("skipped", f"the study already had {spec.n_trials} trials when this one started")
            raise _Skipped()
        params = space.sample(trial)
        data = merge(spec.base, expand_dotted(params))
        if spec.trial_trainer:
            data = merge(data, {"trainer": trial_trainer(spec.trial_trainer, trial.number)})
        try:
            cfg = build_config(spec.task, data)
        except ConfigError as err:
            reason = "; ".join(line.strip() for line in str(err).splitlines()[1:]) or str(err)
            trial.set_user_attr("rejected", f"{reason} (not trained)")
            raise optuna.TrialPruned(f"rejected: {reason}") from None
        run_dir = study_dir / "trials" / f"trial-{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("worker", f"{os.uname().nodename}:{os.getpid()}")
        start = time.perf_counter()
        try:
            result = fit(task, cfg, callbacks=[PruningCallback(trial, monitor)], run_dir=run_dir)
        except optuna.TrialPruned as err:
            trial.set_user_attr("pruned", str(err))
            trial.set_user_attr("wall_s", time.perf_counter() - start)
            mark_stopped(run_dir)  # its MLflow run KILLED, not FAILED
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", "interrupted (Ctrl-C)")
            raise
        except Exception as err:
            trial.set_user_attr("fail_reason", _reason(err))
            trial.set_user_attr("wall_s", time.perf_counter() - start)
            raise
        trial.set_user_attr("wall_s", time.perf_counter() - start)
        trial.set_user_attr("metrics", {k: float(v) for k, v in result.metrics.items()})
        value = result.metrics.get(monitor)
        if value is None or not math.isfinite(value):
            reason = f"the best checkpoint has no finite {monitor} (metrics: {result.metrics})"
            trial.set_user_attr("fail_reason", reason)
            raise TrialFailed(reason)
        return float(value)

    return objective


def trial_trainer(study: dict[str, Any], number: int) -> dict[str, Any]:
    """The study's trainer keys for trial ``number``: its MLflow run tagged with the trial's number."""
    if "mlflow_tags" not in study:
        return study
    return {**study, "mlflow_tags": {**study["mlflow_tags"], "optuna.trial": str(number)}}


class _Skipped(Exception):
    """A trial started over the budget by a worker racing others: recorded as failed, not counted."""


def _fail_stale(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def run_worker(
    spec: WorkerSpec,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
) -> None:
    """One process's share of a study: run trials until the study has ``n_trials`` counted trials
    (waiting for the ones other processes are running), the deadline passes, or the parent dies.
    ``sampler`` / ``pruner`` objects replace the ones ``spec`` names."""
    quiet_optuna()
    task = get_task(spec.task)
    monitor = getattr(task, "monitor", ("val/acc", "max"))[0]
    space = load_space(spec.space)
    storage = open_storage(spec.storage, spec.heartbeat, create=False)  # tune() made it
    study = optuna.load_study(study_name=spec.study_name, storage=storage)
    max_epochs = None if "trainer.max_epochs" in space.keys else spec.base["trainer"]["max_epochs"]
    study.pruner = pruner or make_pruner(spec.pruner, spec.startup_trials, max_epochs)
    objective = _objective(spec, space, monitor)
    prefix = f"[worker {spec.worker}] " if spec.worker else ""
    finished: list[FrozenTrial] = []
    rejected_in_a_row = 0

    def report(study: optuna.Study, trial: FrozenTrial) -> None:
        finished.append(trial)
        if spec.verbose:
            log.info(prefix + describe(trial, monitor))

    while True:
        if spec.deadline is not None and time.time() >= spec.deadline:
            break
        if spec.parent_pid is not None and os.getppid() != spec.parent_pid:
            break  # the tune process that started this worker is gone
        _fail_stale(study)
        trials = study.get_trials(deepcopy=False)
        done = sum(counts_toward_budget(t) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if done >= spec.n_trials:
            break
        if done + running >= spec.n_trials:
            time.sleep(min(2.0, spec.heartbeat))  # the last trials run elsewhere (or their process died)
            continue
        # A fresh sampler seed per trial, from (seed, worker, trials so far): deterministic for one
        # worker, independent streams for different seeds and workers, new draws after a resume.
        trial_seed = int(np.random.SeedSequence([spec.seed % 2**32, spec.worker, len(trials)]).generate_state(1)[0])
        # The GP models completed trials only: a rejected sample teaches it nothing, and it would propose
        # the same invalid combination again. The trial after a rejection is drawn at random instead.
        name = "random" if spec.sampler == "gp" and rejected_in_a_row else spec.sampler
        study.sampler = sampler or make_sampler(name, trial_seed, spec.startup_trials)
        try:
            study.optimize(objective, n_trials=1, catch=(Exception,), callbacks=[report])
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process took this trial for dead (a heartbeat came too late): it was re-queued
        last = finished[-1] if finished else None
        if last is not None and "rejected" in last.user_attrs:
            rejected_in_a_row += 1
            if rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
                raise ConfigError(
                    f"{MAX_REJECTED_IN_A_ROW} sampled configurations in a row were invalid (last: "
                    f"{last.user_attrs['rejected']}); make the searched keys compatible (e.g. num_heads choices "
                    "that divide every d_model choice)"
                )
        else:
            rejected_in_a_row = 0


def worker_main(path: str) -> int:
    """Entry point of a ``--workers`` process (``python -m attnkit.tuning.worker SPEC.json``)."""
    spec = WorkerSpec(**json.loads(Path(path).read_text()))
    torch.set_num_threads(1)
    try:
        run_worker(spec)
    except ConfigError as err:
        log.error(f"[worker {spec.worker}] error: {err}")
        return 2
    return 0
