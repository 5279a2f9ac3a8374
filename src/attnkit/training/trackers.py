"""Experiment trackers: where a run's parameters, metrics and files are logged (``trainer.loggers``).

Each kind is one of Lightning's own loggers, registered in :data:`TRACKERS`:

- ``tensorboard``, ``csv`` (the default): ``logs/tensorboard`` and ``logs/csv`` in the run folder;
- ``mlflow``: Lightning's ``MLFlowLogger`` on ``trainer.mlflow_uri`` (a server ``http://host:5000``, a
  database ``sqlite:///runs.db``, or a folder, which gets ``mlflow.db`` and ``artifacts/``; default
  ``$MLFLOW_TRACKING_URI``, else the folder ``<output_dir>/mlflow``), experiment ``trainer.mlflow_experiment``
  (default the task's name), run name the run folder's name, tags ``trainer.mlflow_tags``;
- ``wandb``: Lightning's ``WandbLogger``, in ``<run folder>/wandb``, offline unless ``WANDB_MODE`` says
  otherwise, project ``trainer.wandb_project`` (default ``$WANDB_PROJECT``, else ``attnkit``), group
  ``trainer.wandb_group``.

Both log the run's config as parameters (MLflow: flattened, ``trainer.max_epochs``; W&B: its config), the
metrics as they are logged, and, when the run ends, ``config.yaml`` and ``metrics.json`` as files;
``report.html`` follows when it is written (:func:`log_run_files`). Each tracker's run id is written to
``trackers.json`` in the run folder: ``--resume`` continues the same tracker runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from attnkit.errors import ConfigError
from attnkit.registry import Registry

if TYPE_CHECKING:
    import lightning as L
    from lightning.pytorch.loggers import Logger

__all__ = [
    "TRACKERS",
    "TRACKERS_FILE",
    "TrackerKind",
    "Trackers",
    "check_trackers",
    "end_parent_run",
    "flatten_config",
    "log_run_files",
    "mark_stopped",
    "mlflow_location",
    "start_parent_run",
]

TRACKERS_FILE = "trackers.json"


@dataclass(frozen=True)
class TrackerKind:
    """A kind of logger: ``build(cfg, run_dir, task, previous)`` -> Lightning logger; ``package``: the module it
    needs (``None``: Lightning's own), named with its extra in the error when it is missing."""

    build: Callable[[Any, Path, str, dict[str, Any] | None], Logger]
    package: str | None = None


TRACKERS: Registry[TrackerKind] = Registry("logger")


def flatten_config(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"trainer": {"max_epochs": 2}}`` -> ``{"trainer.max_epochs": 2}`` (lists stay values)."""
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten_config(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _params(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The module's hyper-parameters as a tracker shows them: the run's config, the task, the model's
    family, and the version (not the data's artifacts, a vocabulary can be megabytes)."""
    config = hparams.get("config")
    out: dict[str, Any] = dict(config) if isinstance(config, Mapping) else {}
    out["task"] = hparams.get("task")
    model = hparams.get("model")
    if isinstance(model, Mapping):
        out["model_family"] = model.get("name")
    out["attnkit_version"] = hparams.get("attnkit_version")
    return out


def check_trackers(cfg: Any) -> None:
    """Refuse, before any data is read, a logger whose package is not installed (naming the extra)."""
    for name in cfg.trainer.loggers:
        package = TRACKERS.get(name).package
        if package is not None and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"trainer.loggers names {name}, but the {package} package is not installed: "
                f"pip install 'attnkit[{name}]' (or leave {name} out of trainer.loggers)"
            )
    if "wandb" in cfg.trainer.loggers:
        _wandb_mode()  # a WANDB_MODE W&B does not know


# -- the kinds --------------------------------------------------------------------------------------


def _tensorboard(cfg: Any, run_dir: Path, task: str, previous: dict[str, Any] | None) -> Logger:
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=run_dir, name="logs", version="tensorboard", default_hp_metric=False)


def _csv(cfg: Any, run_dir: Path, task: str, previous: dict[str, Any] | None) -> Logger:
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=run_dir, name="logs", version="csv")


def mlflow_location(uri: str | None, output_dir: str | Path) -> tuple[str, str | None]:
    """``trainer.mlflow_uri`` -> (tracking URI, artifact location of new experiments or ``None``): a URI
    (``http://``, ``sqlite://``, ...) as it is; a folder -> its ``mlflow.db``, its ``artifacts/``; none ->
    ``$MLFLOW_TRACKING_URI``, else the folder ``<output_dir>/mlflow``."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or str(Path(output_dir) / "mlflow")
    if "://" in uri or uri.split(":", 1)[0] in ("file", "databricks"):  # `databricks`, `databricks:profile`
        return uri, None
    folder = Path(uri).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


def _mlflow(cfg: Any, run_dir: Path, task: str, previous: dict[str, Any] | None) -> Logger:
    from lightning.pytorch.loggers import MLFlowLogger

    class AttnkitMLFlowLogger(MLFlowLogger):
        """The run's config as flat parameters; on a resumed run, only the ones not logged yet
        (MLflow's parameters cannot change)."""

        def log_hyperparams(self, params: Any) -> None:
            flat = {k: v for k, v in flatten_config(_params(params)).items() if v is not None}
            if previous is not None:
                logged = self.experiment.get_run(self.run_id).data.params
                flat = {k: v for k, v in flat.items() if k not in logged}
            super().log_hyperparams(flat)

    t = cfg.trainer
    uri, artifacts = mlflow_location(t.mlflow_uri, cfg.output_dir)
    tags = {**t.mlflow_tags, "attnkit.task": task, "attnkit.run_dir": str(Path(run_dir).resolve())}
    return AttnkitMLFlowLogger(
        experiment_name=t.mlflow_experiment or task,
        run_name=Path(run_dir).name,
        tracking_uri=uri,
        tags=tags,
        artifact_location=artifacts,
        run_id=(previous or {}).get("run_id"),
        synchronous=False,  # MLflow's queue sends the metrics from a thread of its own, off the training step
    )


WandbMode = Literal["online", "offline", "disabled", "shared"]
_WANDB_MODES: dict[str, WandbMode] = {
    "online": "online", "run": "online", "offline": "offline", "dryrun": "offline", "disabled": "disabled",
    "shared": "shared",
}  # fmt: skip


def _wandb_mode(mode: str | None = None) -> WandbMode:
    """``$WANDB_MODE`` when set (online, offline, disabled), else offline: nothing leaves the machine unasked."""
    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    if mode not in _WANDB_MODES:
        raise ConfigError(f"WANDB_MODE={mode!r} is not a W&B mode: set it to online, offline or disabled (or unset it)")
    return _WANDB_MODES[mode]


def _wandb_settings() -> Any:
    import wandb

    return wandb.Settings(silent=True, console="off", disable_git=True)


def _wandb_save(run: Any, paths: Iterable[str]) -> None:
    """Copies of ``paths`` in the W&B run's files (uploaded by ``wandb sync`` as they are now)."""
    for path in paths:
        copy = Path(run.dir) / Path(path).name
        shutil.copyfile(path, copy)
        run.save(str(copy), base_path=run.dir, policy="now")


def _wandb(cfg: Any, run_dir: Path, task: str, previous: dict[str, Any] | None) -> Logger:
    from lightning.pytorch.loggers import WandbLogger

    class AttnkitWandbLogger(WandbLogger):
        """The run's config as W&B's config (nested, as the YAML)."""

        def log_hyperparams(self, params: Any) -> None:
            self.experiment.config.update(_params(params), allow_val_change=True)

    t = cfg.trainer
    return AttnkitWandbLogger(
        name=Path(run_dir).name,
        save_dir=str(run_dir),
        project=t.wandb_project or os.environ.get("WANDB_PROJECT") or "attnkit",
        id=(previous or {}).get("run_id"),
        group=t.wandb_group,
        job_type=task,
        mode=_wandb_mode(),
        settings=_wandb_settings(),
    )


TRACKERS.add("tensorboard", TrackerKind(_tensorboard))
TRACKERS.add("csv", TrackerKind(_csv))
TRACKERS.add("mlflow", TrackerKind(_mlflow, "mlflow"))
TRACKERS.add("wandb", TrackerKind(_wandb, "wandb"))


# -- a run's trackers -------------------------------------------------------------------------------


def _read_record(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / TRACKERS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_record(run_dir: Path, record: Mapping[str, Any]) -> None:
    path = Path(run_dir) / TRACKERS_FILE
    tmp = path.with_name(f".{TRACKERS_FILE}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)


def _flush_mlflow(names: Iterable[str]) -> None:
    """Wait for the metrics and parameters MLflow's queue still holds (the loggers log asynchronously)."""
    if "mlflow" in names:
        import mlflow

        mlflow.flush_async_logging()


def _callback_base() -> type:
    """Lightning's ``Callback``, imported on first use (the training config imports this module)."""
    from lightning.pytorch.callbacks import Callback

    return Callback


class Trackers:
    """The loggers of one run (``trainer.loggers``) and what they do around it: ``loggers`` for the
    Trainer, :attr:`callback` (records the tracker runs in ``trackers.json`` when training starts, ends a W&B
    run that failed), :meth:`finish` once ``metrics.json`` is written (global rank 0 only).

    ``resume``: continue the tracker runs recorded in ``run_dir/trackers.json``.
    """

    def __init__(self, cfg: Any, run_dir: str | Path, task: str, *, resume: bool = False) -> None:
        check_trackers(cfg)
        self.cfg = cfg
        self.task = task
        self.run_dir = Path(run_dir)
        previous = _read_record(self.run_dir) if resume else {}
        self.names: list[str] = list(cfg.trainer.loggers)
        self.loggers: list[Any] = [
            TRACKERS.get(name).build(cfg, self.run_dir, task, previous.get(name)) for name in self.names
        ]
        self.callback = _recorder(self)

    def record(self) -> dict[str, Any]:
        """Each tracker's run: how to find it again (tracking URI, run id; W&B's project, mode and folder)."""
        out: dict[str, Any] = {}
        for name, logger in zip(self.names, self.loggers, strict=True):
            if name == "mlflow":
                uri, _ = mlflow_location(self.cfg.trainer.mlflow_uri, self.cfg.output_dir)
                info = {"tracking_uri": uri, "experiment_id": logger.experiment_id, "run_id": logger.run_id}
                out[name] = info
            elif name == "wandb":
                run = logger.experiment
                out[name] = {"run_id": run.id, "project": run.project, "mode": _wandb_mode(), "files": run.dir}
        return out

    def write_record(self, run_dir: Path | None = None) -> None:
        record = self.record()
        if record:
            _write_record(run_dir or self.run_dir, record)

    def finish(self, run_dir: Path) -> None:
        """The run ended: ``config.yaml`` and ``metrics.json`` to each tracker, its W&B run finished."""
        self.run_dir = Path(run_dir)
        self.write_record()
        _flush_mlflow(self.names)
        files = [str(p) for p in (self.run_dir / "config.yaml", self.run_dir / "metrics.json") if p.is_file()]
        for name, logger in zip(self.names, self.loggers, strict=True):
            if name == "mlflow":
                for path in files:
                    logger.experiment.log_artifact(logger.run_id, path)
            elif name == "wandb":
                run = logger.experiment
                _wandb_save(run, files)
                run.finish()

    def failed(self) -> None:
        """Training raised: end this process's W&B run (the next run would reuse it otherwise)."""
        if "wandb" in self.names:
            import wandb

            if wandb.run is not None:
                wandb.run.finish(exit_code=1)


def _recorder(trackers: Trackers) -> L.Callback:
    base = _callback_base()

    class TrackerRecord(base):  # type: ignore[valid-type,misc]  # Lightning's Callback, imported on first use
        def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            if trainer.is_global_zero:
                trackers.write_record()

        def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
            if trainer.is_global_zero:
                trackers.failed()

    return TrackerRecord()


def log_run_files(run_dir: str | Path, paths: Iterable[str | Path]) -> None:
    """Add files written after training (``report.html``) to the tracker runs of ``run_dir/trackers.json``:
    MLflow's as artifacts; W&B's by resuming its run (offline: a second offline folder of the same run id,
    which ``wandb sync`` uploads to that run)."""
    record = _read_record(Path(run_dir))
    files = [str(p) for p in paths if Path(p).is_file()]
    if not files:
        return
    mlflow_run = record.get("mlflow")
    if isinstance(mlflow_run, dict) and mlflow_run.get("run_id"):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(mlflow_run["tracking_uri"])
        for path in files:
            client.log_artifact(mlflow_run["run_id"], path)
    wandb_run = record.get("wandb")
    if isinstance(wandb_run, dict) and wandb_run.get("run_id"):
        import wandb

        run = wandb.init(
            id=wandb_run["run_id"],
            project=wandb_run.get("project"),
            dir=str(run_dir),
            resume="allow",
            mode=_wandb_mode(wandb_run.get("mode")),
            settings=_wandb_settings(),
        )
        _wandb_save(run, files)
        run.finish()


def mark_stopped(run_dir: str | Path) -> None:
    """A run stopped on purpose (a pruned trial): its MLflow run ``KILLED`` rather than ``FAILED``."""
    mlflow_run = _read_record(Path(run_dir)).get("mlflow")
    if isinstance(mlflow_run, dict) and mlflow_run.get("run_id"):
        from mlflow.tracking import MlflowClient

        _flush_mlflow(["mlflow"])
        MlflowClient(mlflow_run["tracking_uri"]).set_terminated(mlflow_run["run_id"], "KILLED")


# -- a study's parent run (attnkit tune) ------------------------------------------------------------


def start_parent_run(cfg: Any, task: str, name: str, run_id: str | None = None) -> str | None:
    """The MLflow run a tuning study's trials are nested under (their tag ``mlflow.parentRunId``):
    ``run_id`` when it still exists (a resumed study), else a new one named ``name``; ``None`` when
    ``trainer.loggers`` has no mlflow."""
    if "mlflow" not in cfg.trainer.loggers:
        return None
    check_trackers(cfg)
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, artifacts = mlflow_location(cfg.trainer.mlflow_uri, cfg.output_dir)
    client = MlflowClient(uri)
    if run_id is not None:
        try:
            client.update_run(run_id, status="RUNNING")  # the study goes on
            return run_id
        except MlflowException:
            pass  # deleted, or another tracking server: start another
    experiment = cfg.trainer.mlflow_experiment or task
    found = client.get_experiment_by_name(experiment)
    if found is not None and found.lifecycle_stage != "deleted":
        experiment_id = found.experiment_id
    else:
        experiment_id = client.create_experiment(experiment, artifact_location=artifacts)
    tags = {**cfg.trainer.mlflow_tags, "attnkit.task": task, "attnkit.study": name, "mlflow.runName": name}
    return str(client.create_run(experiment_id, tags=tags).info.run_id)


def end_parent_run(
    cfg: Any, run_id: str, *, metrics: Mapping[str, float], tags: Mapping[str, Any], files: Iterable[Path]
) -> None:
    """A study's parent run gets its figures (metrics), the best trial's keys (tags: they change when the
    study goes on) and the study's files, and ends."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    uri, _ = mlflow_location(cfg.trainer.mlflow_uri, cfg.output_dir)
    client = MlflowClient(uri)
    stamp = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), stamp, 0) for k, v in metrics.items()],
        tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()],
    )
    for path in files:
        if Path(path).is_file():
            client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, "FINISHED")
