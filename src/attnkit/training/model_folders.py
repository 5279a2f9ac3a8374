"""A model folder used where a run is expected: every command that takes a RUN also takes an attnkit
model folder (``attnkit.json``, written by ``attnkit import`` / ``attnkit export``) or a Hugging Face
folder of a supported family (``config.json``), as :func:`attnkit.training.resolve.resolve_model` tells
them apart.

The folder becomes a :class:`~attnkit.training.task.LoadedRun` of its task: the task an ``attnkit
export`` folder was exported from, and ``lm`` for a decoder (a Hugging Face one, or an imported one)
with its own tokenizer. The run's config is the task's defaults with the model's
architecture; its artifacts are the folder's (the tokenizer of a decoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnkit.config import StrictModel
from attnkit.data.lm.blocks import artifacts_of
from attnkit.errors import CheckpointError
from attnkit.interop import load_pretrained
from attnkit.models import LanguageModel
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.resolve import ResolvedModel, resolve_model
from attnkit.training.task import LoadedRun, Task
from attnkit.version import __version__

__all__ = ["load_model_folder"]


def load_model_folder(path: str | Path | ResolvedModel, tasks: Task[Any] | Mapping[str, Task[Any]]) -> LoadedRun:
    """The model folder ``path`` as a run of its task (see the module docstring); ``tasks`` as
    :func:`attnkit.training.runner.load_run`'s."""
    resolved = resolve_model(path)
    if not resolved.is_model_folder:
        raise CheckpointError(f"{resolved.path} is an attnkit run, not a model folder: load it with load_run")
    folder = resolved.path
    pretrained = load_pretrained(folder)
    model = pretrained.model
    attnkit_folder = resolved.kind == "model_folder"
    name = pretrained.info.get("task") if attnkit_folder else None
    if name is None and isinstance(model, LanguageModel):
        name = "lm"
    if name is None:
        raise CheckpointError(
            f"{folder} holds a {pretrained.name!r} model that no task runs as it is (an encoder without a task head); "
            f"fine-tune it first, e.g. `attnkit train classify model.init={folder}`"
        )
    if isinstance(tasks, Task):
        if name != tasks.name:
            raise CheckpointError(f"{folder} holds a model of task {name!r}; this needs one of task {tasks.name!r}")
        task = tasks
    elif name in tasks:
        task = tasks[name]
    else:
        raise CheckpointError(f"{folder} holds a model of task {name!r}, which is not one of the tasks {sorted(tasks)}")
    artifacts = pretrained.info.get("artifacts") if attnkit_folder else None
    if not artifacts and isinstance(model, LanguageModel):
        if not isinstance(pretrained.tokenizer, Tokenizer):
            raise CheckpointError(
                f"{folder} has no tokenizer files (tokenizer.json, or vocab.json + merges.txt): a language model "
                "needs its tokenizer to read and write text"
            )
        artifacts = artifacts_of(pretrained.tokenizer)
    config = model.config
    if not isinstance(config, StrictModel):  # every registered attnkit model keeps its typed config
        raise CheckpointError(f"{folder}: its model has no attnkit config")
    model_config = config.model_dump(mode="json")
    section = task.config_cls.model_fields["model"].annotation
    model_fields = section.model_fields if isinstance(section, type) and issubclass(section, BaseModel) else {}
    cfg = task.config(
        {"model": {k: v for k, v in model_config.items() if k in model_fields}},
        source=f"the architecture of {folder}",
    )
    num_classes = model.config.vocab_size if isinstance(model, LanguageModel) else getattr(config, "num_classes", None)
    hparams: dict[str, Any] = {
        "task": task.name,
        "config": cfg.model_dump(mode="json"),
        "model": {"name": pretrained.name, "config": model_config},
        "artifacts": artifacts or {},
        "attnkit_version": __version__,
        "num_classes": num_classes,
    }
    module = task.module_class()(**hparams)
    module.model.load_state_dict(model.state_dict())
    module.eval()
    return LoadedRun(task=task, config=cfg, module=module, checkpoint=folder, run_dir=None, hparams=hparams)
