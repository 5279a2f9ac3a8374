"""attnkit model folders: the weights as safetensors plus a JSON config, loaded back bit-exactly.

A folder holds ``model.safetensors`` (the model's state dict; tied weights stored once),
``attnkit.json`` (``{"format": "attnkit.model", "version": 1, "model": {"name", "config"}, ...}``
with the registry name and full config of the model, and optionally the ``task`` and data
``artifacts`` of the run it came from, and its ``source``) and, for a pretrained tokenizer,
``tokenizer.json`` + ``tokenizer_config.json``. ``attnkit export RUN --out DIR`` and
``attnkit import PATH --out DIR`` write one.

Version 2 folders are checked on load: ``attnkit.json`` lists the SHA-256 of every other file attnkit
wrote (``"files": {name: sha256}``) and its own (``"sha256"``: of the JSON less that key, see
:func:`info_digest`), so a corrupted file (a flipped bit in the weights) is an error naming it instead of
a model with other weights. Version 1 folders (written before, without hashes) load unchecked.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
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
    "check_files",
    "file_sha256",
    "info_digest",
    "load_model",
    "model_name",
    "plain_model",
    "read_model_info",
    "save_model",
]

FORMAT = "attnkit.model"
VERSION = 2  # 2: with the SHA-256 of every file; 1 (still read, unchecked): without
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
    extra_files: Mapping[str, str] | None = None,
) -> Path:
    """Write ``model`` (a registered attnkit model with a ``config``) to ``folder``; returns the folder.

    ``extra_files``: more text files to write into the folder (name: content, e.g. a chat template),
    checked on load like the weights. ``attnkit.json``, with the SHA-256 of every file, is written last."""
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
    names = [MODEL_FILE]
    if tokenizer is not None:
        tokenizer.save(folder)
        names += ["tokenizer.json", "tokenizer_config.json"]
    files = {name: file_sha256(folder / name) for name in names}  # just written: read from the page cache
    for name, text in (extra_files or {}).items():
        if Path(name).name != name or name in ("", ".", "..", INFO_FILE):
            raise ValueError(f"extra file {name!r}: give a plain file name (not {INFO_FILE}), no folders")
        blob = text.encode("utf-8")
        (folder / name).write_bytes(blob)
        files[name] = hashlib.sha256(blob).hexdigest()
    info["files"] = files
    info["sha256"] = info_digest(info)
    tmp = folder / f".{INFO_FILE}.tmp"
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, folder / INFO_FILE)  # last, and whole: a folder with attnkit.json is complete
    return folder


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of the file ``path``, read in a stream."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def info_digest(info: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of an ``attnkit.json``'s content less its ``"sha256"`` key (as sorted, compact JSON)."""
    body = {key: value for key, value in info.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _corrupt(path: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: {why}; the file is corrupt or was changed after attnkit wrote the folder. "
        "Write the folder again (`attnkit export RUN --out DIR` or `attnkit import PATH --out DIR`)"
    )


def check_files(folder: str | Path, info: Mapping[str, Any], names: Iterable[str] | None = None) -> None:
    """Check that the files of the attnkit model folder ``folder`` (``info``: its :func:`read_model_info`)
    hold what was written: each file listed in ``info["files"]`` (or the listed ones of ``names``) must
    exist and have its SHA-256; a :class:`CheckpointError` names the first that does not. A version 1
    folder (no hashes) is not checked."""
    folder = Path(folder)
    files = info.get("files") or {}
    for name in files if names is None else [n for n in names if n in files]:
        path = folder / name
        if not path.is_file():
            raise _corrupt(path, f"the file is missing, but {INFO_FILE} lists it as written with the model")
        if file_sha256(path) != files[name]:
            raise _corrupt(path, f"its content does not match what was written (its SHA-256 in {INFO_FILE})")


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
    version = info.get("version")
    if type(version) is not int or version not in (1, VERSION):  # not True or 1.0
        raise ConfigError(f"{path}: unsupported version {info.get('version')!r} (this attnkit reads 1 to {VERSION})")
    model = info.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    ok = isinstance(name, str) and name in MODELS
    if not isinstance(model, dict) or not ok or not isinstance(model.get("config"), dict):
        raise ConfigError(f"{path}: 'model' must be {{'name': one of {sorted(MODELS)}, 'config': {{...}}}}")
    _check_hashes(path, info)
    return info


def _check_hashes(path: Path, info: dict[str, Any]) -> None:
    """``info`` (read from ``path``) must hold its own SHA-256 and a valid ``files`` map: at version 2
    always, at version 1 where present (version 1 folders were written without them)."""
    files, digest = info.get("files"), info.get("sha256")
    if info["version"] == 1 and files is None and digest is None:
        return
    if not isinstance(files, dict) or not isinstance(digest, str):
        raise _corrupt(path, "'files' (the SHA-256 of each file) or 'sha256' (its own) is missing or malformed")
    if digest != info_digest(info):
        raise _corrupt(path, "its content does not match what was written (its own SHA-256, 'sha256')")
    for name, sha in files.items():
        if Path(name).name != name or name in ("", ".", "..", INFO_FILE) or not isinstance(sha, str):
            raise _corrupt(path, f"'files' must map file names in the folder to SHA-256s, not {name!r}: {sha!r}")


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
    check_files(folder, info, [MODEL_FILE])
    try:
        _load_safetensors_model(model, weights, strict=True)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(
            f"cannot read {weights}: not a valid safetensors file, truncated or corrupt ({err})"
        ) from None
    except RuntimeError as err:
        raise CheckpointError(f"{weights} does not fit the model described in {INFO_FILE}: {err}") from None
    return model.eval()
