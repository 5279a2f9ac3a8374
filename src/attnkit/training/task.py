"""The task contract: what the runner (:mod:`attnkit.training.runner`) needs of a task.

A task (:mod:`attnkit.tasks` holds the ready-made ones) is a :class:`Task` over its config class:
``class ReverseTask(Task[ReverseConfig])`` with ``config_cls = ReverseConfig``. It builds its data
module, says which model to build (a :class:`ModelSpec`), which :class:`~attnkit.training.module.TaskModule`
trains it (the module declares its metrics) and which logged metric picks the best checkpoint
(``monitor``). The runner is given tasks and never imports :mod:`attnkit.tasks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import Field, model_validator
from torch import Tensor

from attnkit.config import StrictModel, merge, validate_config
from attnkit.training.config import OptimConfig, TrainerConfig

if TYPE_CHECKING:  # annotations only: describing a task must not import Lightning (`attnkit tasks`)
    import lightning as L

    from attnkit.training.module import TaskModule

__all__ = ["AttentionExample", "LoadedRun", "ModelSpec", "Task", "TaskConfig"]


class TaskConfig(StrictModel):
    """Sections every task has; tasks add ``model`` and ``data``.

    A task's own defaults are its config class's :attr:`defaults`: per section, the values that differ
    from that section's class defaults (``{"optim": {"lr": 5e-4}, "model": {"d_model": 32}}``), declared
    once, never by re-declaring a field in a subclass. A section given as a mapping (YAML, the command
    line, ``model_validate``) is merged over the task's defaults for it, so ``{"model": {"d_model": 64}}``
    keeps the task's other model defaults; a section given as a config object is used as it is.
    """

    defaults: ClassVar[dict[str, Any]] = {}

    seed: int = Field(42, description="seeds Python, NumPy and torch (and data-loader workers)")
    output_dir: str = Field("runs", description="runs are written to <output_dir>/<task>/<run-id>/")
    name: str | None = Field(
        None, description="run id (default: a timestamp; several machines agree on the first process's one)"
    )
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()

    @classmethod
    def task_defaults(cls) -> dict[str, Any]:
        """The task's defaults: :attr:`defaults` of this class and its bases, merged (subclasses win)."""
        out: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            own = klass.__dict__.get("defaults")
            if isinstance(own, dict):
                out = merge(out, own)
        return out

    @model_validator(mode="before")
    @classmethod
    def _merge_task_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for section, values in cls.task_defaults().items():
            given = out.get(section)
            if section not in out:
                out[section] = values
            elif isinstance(given, dict) and isinstance(values, dict):
                out[section] = merge(values, given)
            # a config object (BaseModel) or anything else is validated as given
        return out


C = TypeVar("C", bound=TaskConfig)


@dataclass(frozen=True)
class ModelSpec:
    """The model a task trains, once its data module is set up.

    ``name``: a model registry name (:data:`attnkit.models.MODELS`); ``config``: that model's full
    config as JSON-able values (stored in every checkpoint, so the model can be rebuilt from it);
    ``num_classes``: how many classes the model's outputs choose between, for the module's
    class metrics (e.g. accuracy); None when the task has none.
    """

    name: str
    config: dict[str, Any]
    num_classes: int | None = None


class Task(Generic[C]):
    """A ready-made experiment over config class ``C``. Subclasses set the class attributes and
    implement the methods."""

    name: ClassVar[str]
    summary: ClassVar[str]
    config_cls: type[C]
    # The metric that picks the best checkpoint (and early stopping): (logged name, "max" or "min").
    # It must be one the module logs (``<stage>/loss`` or ``<stage>/<name>`` of its metrics()).
    monitor: ClassVar[tuple[str, str]] = ("val/acc", "max")
    # Inputs are feature vectors that a run standardises with its training statistics (``--standardized``).
    feature_inputs: ClassVar[bool] = False

    def module_class(self) -> type[TaskModule]:
        """The :class:`~attnkit.training.module.TaskModule` that trains this task's model. Imported when
        called (it is a LightningModule), so that listing and describing tasks does not import Lightning."""
        raise NotImplementedError

    def config(self, data: dict[str, Any], *, source: str = "config") -> C:
        """``data`` validated into this task's config class (a :class:`~attnkit.errors.ConfigError` naming
        every bad key otherwise)."""
        cfg = validate_config(self.config_cls, data, source=source)
        assert isinstance(cfg, self.config_cls)
        return cfg

    def build_datamodule(self, cfg: C, artifacts: dict[str, Any] | None = None) -> L.LightningDataModule:
        """The task's data module; ``artifacts`` (from a checkpoint) restore e.g. its vocabulary."""
        raise NotImplementedError

    def model_spec(self, cfg: C, datamodule: Any) -> ModelSpec:
        """The model to train, once the data module is set up (its vocabulary, classes... are known)."""
        raise NotImplementedError

    def init_weights(self, module: TaskModule, cfg: C) -> None:
        """Start a new run's model from existing weights (e.g. a pretrained encoder); called once the
        module is built, never when resuming. By default the model keeps its random initialisation."""

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Turn user inputs (command-line strings) into printable predictions."""
        raise NotImplementedError

    def build_eval_datamodule(
        self, cfg: C, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> L.LightningDataModule:
        """A data module whose *test* split is the user's file ``path`` in the task's format,
        prepared as the run's training data (its vocabulary, its standardisation...): what
        ``attnkit test RUN --data FILE`` scores. ``standardized``: the file's features already are
        (tasks with ``feature_inputs``)."""
        raise NotImplementedError(f"task {self.name!r} cannot be evaluated on a file yet")

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """One JSON-able record per input of the file ``path`` (the prediction and its probability or
        score), computed ``batch_size`` inputs at a time: what ``attnkit predict RUN --file`` writes."""
        raise NotImplementedError(f"task {self.name!r} cannot predict on a file yet")

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """The attention weights of the trained model for each of ``texts`` (inputs written as for
        :meth:`predict`), then for each validation example of ``indices``: what ``attnkit plot
        attention`` and the run report draw."""
        raise NotImplementedError(
            f"task {self.name!r} cannot plot attention maps yet: it needs an attention_examples() method "
            "(see ReverseTask.attention_examples in attnkit/tasks/reverse.py)"
        )

    def report_sections(self, run: LoadedRun) -> list[tuple[str, str, str]]:
        """The task's own sections of the run report (``attnkit report``), each ``(id, title, html)``: e.g.
        the sft task's replies before and after training. None by default."""
        return []


@dataclass
class AttentionExample:
    """One input's attention weights, ready to plot.

    ``maps``: per layer ``[H, Tq, Tk]`` (rows are queries; each row sums to 1 over the keys it may
    attend to). ``query_labels`` / ``key_labels`` name the ``Tq`` / ``Tk`` positions (input tokens,
    or set positions); ``query_axis`` / ``key_axis`` name the axes. ``probabilities`` and ``target``:
    per-position predicted probabilities and the true position, for tasks that point at a position
    (the anomaly task).
    """

    maps: list[Tensor]
    query_labels: list[str]
    key_labels: list[str]
    title: str
    query_axis: str = "query"
    key_axis: str = "key"
    probabilities: list[float] | None = None
    target: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedRun:
    """A trained run rebuilt from its folder or checkpoint (:func:`attnkit.training.runner.load_run`): its task,
    resolved config, trained module (in eval mode), the checkpoint file, the run folder (None for a lone
    checkpoint file) and the checkpoint's hyper-parameters."""

    task: Task[Any]
    config: TaskConfig
    module: TaskModule
    checkpoint: Path
    run_dir: Path | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
