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
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import optuna

from attnkit.errors import ConfigError
from attnkit.tasks import build_config, get_task
from attnkit.tuning.loop import (
    PRUNERS,
    SAMPLERS,
    WorkerSpec,
    default_startup_trials,
    quiet_optuna,
    run_worker,
)
from attnkit.tuning.progress import log, log_summary
from attnkit.tuning.pruning import PruningCallback, TrialFailed
from attnkit.tuning.results import write_results
from attnkit.tuning.space import SearchSpace, load_space
from attnkit.tuning.storage import open_storage, prepare_storage, redact, storage_url
from attnkit.tuning.tracking import end_study_trackers, study_trackers
from attnkit.tuning.trials import META_ATTR, counts_toward_budget
from attnkit.version import __version__

__all__ = ["PruningCallback", "TrialFailed", "counts_toward_budget", "open_storage", "study_folder", "tune"]

# Keys that may differ between the processes or machines of one study (where runs go, how fast they run).
LOCAL_KEYS = (
    "output_dir",
    "name",
    "trainer.threads",
    "trainer.progress_bar",
    "trainer.num_workers",
    *(f"trainer.{key}" for key in ("loggers", "mlflow_uri", "mlflow_experiment", "wandb_project", "wandb_group")),
)


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
    storage: optuna.storages.RDBStorage,
    name: str,
    meta: dict[str, Any],
    direction: Literal["maximize", "minimize"],
    url: str,
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


# -- the public entry point ----------------------------------------------------------------------


def study_folder(output_dir: str | Path, study_name: str) -> Path:
    """The folder of a study: ``<output_dir>/tune/<study_name>``."""
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
    ``study_report.html`` (:func:`attnkit.tuning.results.write_results`). With ``verbose`` the study's
    progress (a line per finished trial, notes, a summary) is logged at INFO to the
    ``attnkit.tuning.progress`` logger (:mod:`attnkit.tuning.progress`), which ``attnkit tune`` shows.
    """
    start = time.perf_counter()
    quiet_optuna()
    spec = get_task(task)
    monitor, mode = getattr(spec, "monitor", ("val/acc", "max"))
    if mode not in ("max", "min"):
        raise ConfigError(f"task {task!r} monitors {monitor} with mode {mode!r}; expected 'max' or 'min'")
    direction: Literal["maximize", "minimize"] = "maximize" if mode == "max" else "minimize"
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
            log.info(f"note: {note}")
        log.info(
            f"study {name}: {task}, {'maximize' if mode == 'max' else 'minimize'} {monitor}; "
            f"{done} of {n_trials} trials done; storage {redact(url)}; folder {study_dir}"
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
        trial_trainer=study_trackers(base_cfg, task, name, study),  # trainer.loggers: trials nested in the study
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
            log_summary(study, files, monitor, time.perf_counter() - start)
    end_study_trackers(base_cfg, study, study_dir, monitor)
    return study


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
