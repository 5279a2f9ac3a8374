"""What a task is: its config, its data, its model and how to predict with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import lightning as L
import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import StrictModel
from attnkit.training.config import OptimConfig, TrainerConfig
from attnkit.training.module import TaskModule

__all__ = ["AttentionExample", "Task", "TaskConfig", "attention_weights"]


class TaskConfig(StrictModel):
    """Sections every task has; tasks add ``model`` and ``data``."""

    seed: int = Field(42, description="seeds Python, NumPy and torch (and data-loader workers)")
    output_dir: str = Field("runs", description="runs are written to <output_dir>/<task>/<run-id>/")
    name: str | None = Field(None, description="run id (default: a timestamp)")
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()


class Task:
    """A ready-made experiment. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    summary: ClassVar[str]
    config_cls: ClassVar[type[TaskConfig]]
    module_cls: ClassVar[type[TaskModule]]
    # The metric that picks the best checkpoint (and early stopping): (logged name, "max" or "min").
    monitor: ClassVar[tuple[str, str]] = ("val/acc", "max")

    def build_datamodule(self, cfg: Any, artifacts: dict[str, Any] | None = None) -> L.LightningDataModule:
        """The task's data module; ``artifacts`` (from a checkpoint) restore e.g. its vocabulary."""
        raise NotImplementedError

    def model_spec(self, cfg: Any, datamodule: Any) -> tuple[str, dict[str, Any], int]:
        """``(model registry name, full model config, number of classes for the accuracy)``
        once the data module is set up."""
        raise NotImplementedError

    def init_weights(self, module: TaskModule, cfg: Any) -> None:
        """Start a new run's model from existing weights (e.g. a pretrained encoder); called once the
        module is built, never when resuming. By default the model keeps its random initialisation."""

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Turn user inputs (command-line strings) into printable predictions."""
        raise NotImplementedError

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


@torch.no_grad()
def attention_weights(model: nn.Module, *args: Any, **kwargs: Any) -> list[Tensor]:
    """The attention weights ``[B, H, Tq, Tk]`` of ``model`` for one input, per attention layer.

    ``model.get_attention_maps(*args, **kwargs)`` when the model has it. Otherwise (a model that
    only ever runs the fused kernel, which keeps no weights) ``model(*args, **kwargs)`` runs once
    with every :class:`attnkit.nn.MultiHeadAttention` on its explicit path (``need_weights=True``,
    same outputs), and the weights of each call are returned in call order.
    """
    get_maps = getattr(model, "get_attention_maps", None)
    if callable(get_maps):
        return list(get_maps(*args, **kwargs))
    from attnkit.nn import MultiHeadAttention

    recorded: list[Tensor] = []

    def want_weights(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return a, {**kw, "need_weights": True}

    def keep(_m: nn.Module, _a: Any, output: tuple[Tensor, Tensor | None]) -> None:
        if output[1] is not None:
            recorded.append(output[1])

    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no attnkit MultiHeadAttention layer and no get_attention_maps()")
    handles = [m.register_forward_pre_hook(want_weights, with_kwargs=True) for m in layers]
    handles += [m.register_forward_hook(keep) for m in layers]
    try:
        model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return recorded
