"""The ready-made experiments, by name, and loading their runs.

Each task registers itself with :func:`register_task` when its module is imported; this package imports
every built-in one. Describing tasks (their names, summaries and config classes) imports neither
Lightning nor the data modules: a task imports those when it trains, evaluates or predicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.data.lm.blocks import tokenizer_of
from attnkit.data.sft.artifacts import chat_of
from attnkit.interop import Pretrained, load_pretrained, plain_model
from attnkit.tasks.registry import TASKS, build_config, get_task, register_task
from attnkit.training.resolve import ResolvedModel, resolve_model
from attnkit.training.task import LoadedRun, ModelSpec, Task, TaskConfig

# The built-in tasks (each registers itself on import).
from attnkit.tasks import anomaly, classify, grpo, lm, preference, reverse, sft, translate  # noqa: F401  isort: skip


def load_run(path: str | Path | ResolvedModel) -> LoadedRun:
    """Rebuild a trained run of any registered task from its run folder or checkpoint file alone (or a
    model folder as a run of its task: :func:`attnkit.training.runner.load_run`)."""
    from attnkit.training import runner  # Lightning: only when a run is loaded

    return runner.load_run(path, dict(TASKS.items()))


def load_model(path: str | Path | ResolvedModel) -> Pretrained:
    """The model at ``path`` with its tokenizer and chat template, whatever kind of model it is: an
    attnkit run (a run folder or checkpoint file; a LoRA run's adapters merged), an attnkit model folder
    (``attnkit import`` / ``attnkit export``) or a Hugging Face folder of a supported family. What
    ``attnkit chat``, ``serve`` and ``eval`` load; see :class:`attnkit.interop.Pretrained` for what
    it offers (``generate``, ``chat``, ``encode_chat``...). What is at ``path`` is
    :func:`attnkit.training.resolve.resolve_model`'s answer."""
    resolved = resolve_model(path)
    if resolved.is_model_folder:
        return load_pretrained(resolved.path)
    loaded = load_run(resolved)
    artifacts = loaded.hparams.get("artifacts") or {}
    tokenizer = tokenizer_of(artifacts) if "tokenizer" in artifacts else None
    model = plain_model(loaded.module.model, merge=True, source=resolved.path).eval()
    template, generation = chat_of(artifacts)  # an sft run's chat template (other runs: the default one)
    return Pretrained(
        model, loaded.hparams["model"]["name"], tokenizer, resolved.path, dict(loaded.hparams), template, generation
    )


def evaluate(path: str | Path, trainer: dict[str, Any] | None = None) -> dict[str, float]:
    """Test a trained run (folder or checkpoint file) on its task's test split; returns the test metrics.
    ``trainer`` overrides the run's trainer section (see :func:`attnkit.training.runner.evaluate`)."""
    from attnkit.training import runner  # Lightning: only when a run is evaluated

    return runner.evaluate(load_run(path), trainer=trainer)


__all__ = [
    "TASKS",
    "LoadedRun",
    "ModelSpec",
    "Task",
    "TaskConfig",
    "build_config",
    "evaluate",
    "get_task",
    "load_model",
    "load_run",
    "register_task",
]
