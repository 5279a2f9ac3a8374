"""Hyperparameter search for any task: an Optuna study whose trials are real training runs.

``tune("reverse", space="examples/reverse_space.yaml", n_trials=20)``:

- the base config (the task's defaults, a YAML file, overrides) is resolved and the search space
  checked against it before any trial starts;
- each trial trains the task with the sampled keys in its own run folder
  ``<study folder>/trials/trial-NNNN/`` and reports the task's monitored validation metric
  (``Task.monitor``) after every epoch; a pruner stops unpromising trials (:class:`PruningCallback`);
- a trial that fails (NaN loss, out of memory, any error) is recorded as failed with its reason and
  the study goes on; a sampled combination the config rejects (``num_heads`` not dividing
  ``d_model``) is recorded as pruned with the reason, costs no training and does not count;
- the study lives in a database: a SQLite file in the study folder by default, so a killed ``tune``
  resumes where it stopped when run again (``n_trials`` is the study's total, not "this many more");
  any SQLAlchemy URL (PostgreSQL) lets processes on several machines share one study. Each process
  records a heartbeat for its running trial; a trial whose process died is marked failed and re-run
  once its heartbeat is older than ``4 x heartbeat`` seconds;
- ``workers=K`` runs K processes (one torch thread each) against the same storage.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import optuna
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from optuna.trial import FrozenTrial, TrialState

from attnkit.api import build_config
from attnkit.config import merge
from attnkit.errors import ConfigError
from attnkit.tasks import get_task
from attnkit.training.runner import fit
from attnkit.tuning.results import write_results
from attnkit.tuning.space import SearchSpace, load_space, nested
from attnkit.tuning.storage import open_storage, prepare_storage, redact, storage_url
from attnkit.tuning.trials import META_ATTR, counts_toward_budget
from attnkit.version import __version__

__all__ = ["PruningCallback", "TrialFailed", "counts_toward_budget", "open_storage", "tune"]

SAMPLERS = ("tpe", "random", "gp")
PRUNERS = ("median", "hyperband", "none")
# Keys that may differ between the processes or machines of one study (where runs go, how fast they run).
LOCAL_KEYS = ("output_dir", "name", "trainer.threads", "trainer.progress_bar", "trainer.num_workers")
MAX_REJECTED_IN_A_ROW = 50


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
        value = float(value)
        if not math.isfinite(value):
            raise TrialFailed(f"{self.monitor} is {value} after epoch {epoch + 1}")
        self.trial.report(value, step=epoch)
        last = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        if not last and self.trial.should_prune():  # a run that has trained to the end is complete
            raise optuna.TrialPruned(f"stopped after epoch {epoch + 1} by the pruner: {self.monitor} {value:.4f}")


# -- storage and study ---------------------------------------------------------------------------


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _shared_base(base: dict[str, Any]) -> dict[str, Any]:
    flat = _flatten(base)
    return {k: v for k, v in flat.items() if k not in LOCAL_KEYS}


def _diff(stored: dict[str, Any], now: dict[str, Any]) -> str:
    keys = sorted(set(stored) | set(now))
    parts = [
        f"{k}: stored {stored.get(k, '(absent)')!r}, now {now.get(k, '(absent)')!r}"
        for k in keys
        if stored.get(k) != now.get(k)
    ]
    return "; ".join(parts[:5]) + ("; ..." if len(parts) > 5 else "")


def _open_study(
    storage: optuna.storages.RDBStorage, name: str, meta: dict[str, Any], direction: str, url: str
) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=storage, direction=direction, load_if_exists=True)
    stored = study.user_attrs.get(META_ATTR)
    if stored is None:
        study.set_user_attr(META_ATTR, meta)
        return study
    hint = "resume it with the same task, config and space, or start another study with --study NAME"
    where = f"study {name!r} in {redact(url)}"
    if stored.get("task") != meta["task"]:
        raise ConfigError(f"{where} tunes task {stored.get('task')!r}, not {meta['task']!r}; {hint}")
    if stored.get("space") != meta["space"]:
        diff = _diff(_flatten(stored.get("space")), _flatten(meta["space"]))
        raise ConfigError(f"{where} was started with another search space ({diff}); {hint}")
    if stored.get("base") != meta["base"]:
        raise ConfigError(
            f"{where} was started with another base config ({_diff(stored.get('base', {}), meta['base'])}); {hint}"
        )
    if study.direction.name.lower() != direction:
        raise ConfigError(f"{where} is a study to {study.direction.name.lower()}, not to {direction}; {hint}")
    return study


# -- samplers and pruners ------------------------------------------------------------------------


def _sampler(name: str | optuna.samplers.BaseSampler, seed: int, startup: int) -> optuna.samplers.BaseSampler:
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


def _pruner(
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


# -- the worker loop -----------------------------------------------------------------------------


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
    pruner: str
    seed: int
    startup_trials: int
    heartbeat: int
    worker: int = 0
    verbose: bool = True
    parent_pid: int | None = None


def _quiet_optuna() -> None:
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


def _describe(trial: FrozenTrial, monitor: str) -> str:
    attrs = trial.user_attrs
    params = " ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items())
    wall = f"{attrs['wall_s']:.1f} s  " if "wall_s" in attrs else ""
    if trial.state == TrialState.COMPLETE:
        what = f"complete  {monitor} {trial.value:.4f}  {wall}"
    elif trial.state == TrialState.PRUNED and "rejected" in attrs:
        what = f"rejected  {attrs['rejected']}  "
    elif trial.state == TrialState.PRUNED:
        what = f"pruned    {attrs.get('pruned', '')}  {wall}"
    elif "skipped" in attrs:
        return f"trial {trial.number:>4}  skipped   {attrs['skipped']}"
    else:
        what = f"failed    {attrs.get('fail_reason', attrs.get('interrupted', 'interrupted'))}  {wall}"
    return f"trial {trial.number:>4}  {what}{params}"


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


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
        overrides: dict[str, Any] = {}
        for key, value in params.items():
            overrides = merge(overrides, nested(key, value))
        try:
            cfg = build_config(spec.task, merge(spec.base, overrides))
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
    _quiet_optuna()
    task = get_task(spec.task)
    monitor = getattr(task, "monitor", ("val/acc", "max"))[0]
    space = load_space(spec.space)
    storage = open_storage(spec.storage, spec.heartbeat, create=False)  # tune() made it
    study = optuna.load_study(study_name=spec.study_name, storage=storage)
    max_epochs = None if "trainer.max_epochs" in space.keys else spec.base["trainer"]["max_epochs"]
    study.pruner = pruner or _pruner(spec.pruner, spec.startup_trials, max_epochs)
    objective = _objective(spec, space, monitor)
    prefix = f"[worker {spec.worker}] " if spec.worker else ""
    finished: list[FrozenTrial] = []
    rejected_in_a_row = 0

    def report(study: optuna.Study, trial: FrozenTrial) -> None:
        finished.append(trial)
        if spec.verbose:
            print(prefix + _describe(trial, monitor), flush=True)

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
        study.sampler = sampler or _sampler(name, trial_seed, spec.startup_trials)
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
        print(f"[worker {spec.worker}] error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


# -- the public entry point ----------------------------------------------------------------------


def study_folder(output_dir: str | Path, study_name: str) -> Path:
    return Path(output_dir) / "tune" / study_name


def tune(
    task: str,
    space: str | Path | dict[str, Any] | SearchSpace,
    *,
    n_trials: int = 20,
    config: str | Path | dict[str, Any] | None = None,
    timeout: float | None = None,
    storage: str | Path | None = None,
    study_name: str | None = None,
    workers: int = 1,
    sampler: str | optuna.samplers.BaseSampler = "tpe",
    pruner: str | optuna.pruners.BasePruner | None = "median",
    seed: int | None = None,
    startup_trials: int | None = None,
    heartbeat: int = 10,
    results: bool = True,
    verbose: bool = False,
    **overrides: Any,
) -> optuna.Study:
    """Search ``space`` for the best config of ``task``; returns the Optuna study.

    ``space``: a YAML file or dict of dotted config keys to ranges / choices (see
    :mod:`attnkit.tuning.space`). ``config`` and ``overrides`` (dotted keys or sections, as for
    :func:`attnkit.train`) make the base config that every trial starts from. ``n_trials`` is the
    study's total: running ``tune`` again on the same study resumes it. ``storage``: a SQLAlchemy
    URL or a SQLite file path (default ``<output_dir>/tune/<study>/study.db``). ``timeout``: seconds
    after which no new trial starts. ``workers``: processes on this machine (1 torch thread each).
    ``sampler`` tpe / random / gp (Gaussian process), ``pruner`` median / hyperband / none (or Optuna objects, with one
    worker). With ``results`` the study folder gets ``best.yaml``, ``trials.csv``, plots and
    ``study_report.html`` (:func:`attnkit.tuning.results.write_results`).
    """
    start = time.perf_counter()
    _quiet_optuna()
    spec = get_task(task)
    monitor, mode = getattr(spec, "monitor", ("val/acc", "max"))
    if mode not in ("max", "min"):
        raise ConfigError(f"task {task!r} monitors {monitor} with mode {mode!r}; expected 'max' or 'min'")
    direction = "maximize" if mode == "max" else "minimize"
    if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
        raise ConfigError(f"--trials must be a positive integer, got {n_trials!r}")
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {workers!r}")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"--timeout must be positive (seconds), got {timeout}")
    if not isinstance(heartbeat, int) or heartbeat < 1:
        raise ConfigError(f"heartbeat must be a positive number of seconds, got {heartbeat!r}")
    if workers > 1 and not (isinstance(sampler, str) and (pruner is None or isinstance(pruner, str))):
        raise ConfigError("with workers > 1 give the sampler and pruner by name (tpe/random/gp, median/hyperband/none)")
    for value, names, what in ((sampler, SAMPLERS, "sampler"), (pruner, PRUNERS, "pruner")):
        if isinstance(value, str) and value not in names:
            raise ConfigError(f"unknown {what} {value!r}; choose one of {', '.join(names)}")

    base_cfg = build_config(task, config, overrides)
    base = base_cfg.model_dump(mode="json")
    base["trainer"]["threads"] = base["trainer"].get("threads") or 1  # one torch thread per trial process
    base["trainer"]["progress_bar"] = False
    base["name"] = None
    search = load_space(space)
    notes = search.check(spec.config_cls, base, task)

    name = study_name or task
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"--study {name!r}: use letters, digits, '.', '_' and '-' (it names a folder)")
    study_dir = study_folder(base_cfg.output_dir, name)
    if storage is None:
        study_dir.mkdir(parents=True, exist_ok=True)
    url = storage_url(storage, study_dir)
    store, upgraded = prepare_storage(url, heartbeat)  # once, before any worker starts
    meta = {
        "task": task,
        "space": search.to_dict(),
        "base": _shared_base(base),
        "monitor": monitor,
        "attnkit_version": __version__,
    }
    study = _open_study(store, name, meta, direction, url)
    study_dir.mkdir(parents=True, exist_ok=True)
    if "study_dir" not in study.user_attrs:
        study.set_user_attr("study_dir", str(study_dir.resolve()))

    seed = base_cfg.seed if seed is None else seed
    startup = startup_trials if startup_trials is not None else default_startup_trials(n_trials)
    done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
    if upgraded:
        notes = [*notes, upgraded]
    if verbose:
        for note in notes:
            print(f"note: {note}", flush=True)
        print(
            f"study {name}: {task}, {'maximize' if mode == 'max' else 'minimize'} {monitor}; "
            f"{done} of {n_trials} trials done; storage {redact(url)}; folder {study_dir}",
            flush=True,
        )
    worker = WorkerSpec(
        task=task,
        base=base,
        space=search.to_dict(),
        storage=url,
        study_name=name,
        study_dir=str(study_dir.resolve()),
        n_trials=n_trials,
        deadline=time.time() + timeout if timeout else None,
        sampler=sampler if isinstance(sampler, str) else "tpe",
        pruner=pruner if isinstance(pruner, str) or pruner is None else "median",
        seed=seed,
        startup_trials=startup,
        heartbeat=heartbeat,
        verbose=verbose,
    )
    if workers == 1:
        run_worker(
            worker,
            sampler if isinstance(sampler, optuna.samplers.BaseSampler) else None,
            pruner if isinstance(pruner, optuna.pruners.BasePruner) else None,
        )
    else:
        _run_workers(worker, workers)
    study = optuna.load_study(study_name=name, storage=store)
    if results:
        files = write_results(
            study, study_dir, task=task, base=base, output_dir=base_cfg.output_dir, storage=redact(url)
        )
        if verbose:
            _print_summary(study, files, monitor, time.perf_counter() - start)
    return study


def _print_summary(study: optuna.Study, files: dict[str, Path], monitor: str, wall: float) -> None:
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        if counts_toward_budget(t):
            label = t.state.name.lower().replace("fail", "failed").replace("complete", "completed")
            states[label] = states.get(label, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    print(f"\nstudy {study.study_name}: {sum(states.values())} trials ({parts}); this run took {wall:.1f} s")
    try:
        best = study.best_trial
    except ValueError:
        print("  no trial completed yet")
    else:
        params = " ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
        print(f"  best    trial {best.number}: {monitor} {best.value:.4f}\n          {params}")
    if "best_config" in files:
        print(f"  config  {files['best_config']}")
    print(f"  trials  {files['trials_csv']}")
    print(f"  report  {files['report']}", flush=True)


def _run_workers(spec: WorkerSpec, workers: int) -> None:
    """``workers`` processes of ``python -m attnkit.tuning.worker`` on the same storage; waits for all."""
    study_dir = Path(spec.study_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ATTNKIT_RUN_DIR", None)
    procs = []
    for i in range(1, workers + 1):
        path = study_dir / f".worker-{i}.json"
        data = {**spec.__dict__, "worker": i, "parent_pid": os.getpid()}
        path.write_text(json.dumps(data))
        procs.append(subprocess.Popen([sys.executable, "-m", "attnkit.tuning.worker", str(path)], env=env))
    try:
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        raise
    finally:
        for i in range(1, workers + 1):
            (study_dir / f".worker-{i}.json").unlink(missing_ok=True)
    bad = [f"worker {i + 1} exited with code {c}" for i, c in enumerate(codes) if c != 0]
    if bad:
        raise RuntimeError("; ".join(bad) + " (see its output above); run the same command again to resume")
