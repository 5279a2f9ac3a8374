"""Model folders in and out: a run's model exported (attnkit or Hugging Face format), a Hugging Face
folder imported."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from attnkit.data.lm.blocks import tokenizer_of
from attnkit.data.sft.artifacts import chat_of, write_chat_files
from attnkit.errors import ConfigError
from attnkit.interop import Pretrained, export_hf, load_pretrained, plain_model, save_model
from attnkit.interop import import_model as _convert
from attnkit.tasks import load_model, load_run
from attnkit.training.resolve import resolve_model

__all__ = ["Exported", "export", "import_model", "load_model"]


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote: ``source`` (the checkpoint or model folder read), ``out`` (the
    folder written) and, for the Hugging Face format, the ``model_type`` written (else ``None``)."""

    source: str
    out: Path
    model_type: str | None = None


def export(run: str | Path, out: str | Path, *, format: str = "attnkit", merge: bool = False) -> Exported:
    """Write the model of ``run`` (a run folder or checkpoint file) to the folder ``out``.

    ``format="attnkit"``: ``model.safetensors`` + ``attnkit.json`` with the run's task and data
    artifacts (:func:`attnkit.interop.load_model` loads it back bit-exactly). ``format="hf"``: ``run``
    is an ``lm`` or ``sft`` run or a model folder (attnkit's or Hugging Face's) of a language model,
    written as a Hugging Face folder of the family that expresses it (:func:`attnkit.interop.export_hf`).
    What ``run`` is: :func:`attnkit.training.resolve.resolve_model`. A LoRA run needs
    ``merge=True``: its adapters are folded into the base weights (:func:`attnkit.interop.plain_model`).
    """
    if format == "hf":
        return _export_hf(run, out, merge)
    if format != "attnkit":
        raise ValueError(f"unknown export format {format!r}; choose attnkit or hf")
    loaded = load_run(run)
    model = plain_model(loaded.module.model, merge=merge, source=run)
    artifacts = loaded.hparams.get("artifacts") or None
    template, generation = chat_of(artifacts)  # an sft run's chat template and generation config
    chat = {"chat_template.jinja": template.source} if template is not None else {}
    if generation:
        chat["generation_config.json"] = json.dumps(generation, indent=2) + "\n"
    save_model(model, out, task=loaded.task.name, artifacts=artifacts, source=str(loaded.checkpoint), extra_files=chat)
    return Exported(str(loaded.checkpoint), Path(out))


def _export_hf(run: str | Path, out: str | Path, merge: bool) -> Exported:
    resolved = resolve_model(run)
    if resolved.is_model_folder:
        pretrained = load_pretrained(resolved.path)
        return Exported(str(run), Path(out), export_hf(pretrained.model, out, pretrained.tokenizer))
    loaded = load_run(resolved)
    if loaded.task.name not in ("lm", "sft", "dpo", "kto"):
        raise ConfigError(
            f"{run} is a {loaded.task.name!r} run; only lm, sft, dpo and kto runs export as Hugging Face checkpoints"
        )
    tokenizer = tokenizer_of(loaded.hparams.get("artifacts") or {})
    model = plain_model(loaded.module.model, merge=merge, source=run)
    model_type = export_hf(model, out, tokenizer)
    write_chat_files(loaded.hparams.get("artifacts"), out)
    return Exported(str(loaded.checkpoint), Path(out), model_type)


def import_model(path: str | Path, out: str | Path) -> Pretrained:
    """Convert the Hugging Face BERT, GPT-2, Llama, Mistral or Qwen2 folder ``path`` (config.json,
    weights, tokenizer files) into an attnkit model folder ``out``; returns the loaded model with its
    tokenizer. Nothing is downloaded. See :func:`attnkit.interop.import_model`."""
    return _convert(path, out)
