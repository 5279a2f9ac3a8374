"""attnkit model folders: the weights as safetensors plus a JSON config, loaded back bit-exactly.

A folder holds ``model.safetensors`` (the model's state dict; tied weights stored once),
``attnkit.json`` (``{"format": "attnkit.model", "version": 1, "model": {"name", "config"}, ...}``
with the registry name and full config of the model, and optionally the ``task`` and data
``artifacts`` of the run it came from, and its ``source``) and, for a pretrained tokenizer,
``tokenizer.json`` + ``tokenizer_config.json``. ``attnkit export RUN --out DIR`` and
``attnkit import PATH --out DIR`` write one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_model as _load_safetensors_model
from safetensors.torch import save_model as _save_safetensors_model
from torch import nn

from attnkit.config import validate_config
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models import MODELS, StrictModel, build_model
from attnkit.models.lora import is_lora, merge_lora
from attnkit.text.tokenizers import Tokenizer
from attnkit.version import __version__

__all__ = [
    "FORMAT",
    "INFO_FILE",
    "MODEL_FILE",
    "load_model",
    "model_name",
    "plain_model",
    "read_model_info",
    "save_model",
]

FORMAT = "attnkit.model"
VERSION = 1
INFO_FILE = "attnkit.json"
MODEL_FILE = "model.safetensors"


def model_name(model: nn.Module) -> str:
    """The registry name of ``model`` (see :data:`attnkit.models.MODELS`)."""
    for name, (_, model_cls) in MODELS.items():
        if type(model) is model_cls:
            return name
    raise ValueError(f"{type(model).__name__} is not a registered attnkit model; registered: {sorted(MODELS)}")


def save_model(
    model: nn.Module,
    folder: str | Path,
    *,
    tokenizer: Tokenizer | None = None,
    task: str | None = None,
    artifacts: dict[str, Any] | None = None,
    source: str | None = None,
) -> Path:
    """Write ``model`` (a registered attnkit model with a ``config``) to ``folder``; returns the folder."""
    folder = Path(folder)
    name = model_name(model)
    config = model.config
    assert isinstance(config, StrictModel)  # every registered model keeps its config
    info: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "attnkit_version": __version__,
        "model": {"name": name, "config": config.model_dump(mode="json")},
    }
    for key, value in (("task", task), ("artifacts", artifacts), ("source", source)):
        if value is not None:
            info[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    _save_safetensors_model(model, str(folder / MODEL_FILE), metadata={"format": "pt"})
    (folder / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    if tokenizer is not None:
        tokenizer.save(folder)
    return folder


def plain_model(model: nn.Module, *, merge: bool = False, source: str | Path = "the model") -> nn.Module:
    """The model to export: ``model`` itself, or for a LoRA model (adapters on a frozen base) with
    ``merge=True`` a plain model with the adapters folded into the base weights; a LoRA model without
    ``merge`` is a :class:`ValueError` naming ``source`` (the run it came from)."""
    if not is_lora(model):
        return model
    if not merge:
        raise ValueError(f"{source} is a LoRA run (adapters on a frozen base): add --merge to write the merged weights")
    return merge_lora(model)


def read_model_info(folder: str | Path) -> dict[str, Any]:
    """The checked contents of ``folder/attnkit.json``."""
    path = Path(folder) / INFO_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not an attnkit model folder: it has no {INFO_FILE}")
    try:
        info = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ConfigError(f"{path}: 'format' must be {FORMAT!r}")
    if info.get("version") != VERSION:
        raise ConfigError(f"{path}: unsupported version {info.get('version')!r} (this attnkit reads {VERSION})")
    model = info.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    ok = isinstance(name, str) and name in MODELS
    if not isinstance(model, dict) or not ok or not isinstance(model.get("config"), dict):
        raise ConfigError(f"{path}: 'model' must be {{'name': one of {sorted(MODELS)}, 'config': {{...}}}}")
    return info


def load_model(folder: str | Path) -> nn.Module:
    """The model saved by :func:`save_model` in ``folder``, in eval mode (weights bit-identical)."""
    folder = Path(folder)
    info = read_model_info(folder)
    name = info["model"]["name"]
    config = validate_config(MODELS[name][0], info["model"]["config"], source=f"model config in {folder / INFO_FILE}")
    model = build_model(name, config)
    weights = folder / MODEL_FILE
    if not weights.is_file():
        raise CheckpointError(f"{folder} has {INFO_FILE} but no {MODEL_FILE}")
    try:
        _load_safetensors_model(model, weights, strict=True)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(
            f"cannot read {weights}: not a valid safetensors file, truncated or corrupt ({err})"
        ) from None
    except RuntimeError as err:
        raise CheckpointError(f"{weights} does not fit the model described in {INFO_FILE}: {err}") from None
    return model.eval()
