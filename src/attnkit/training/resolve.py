"""What is at a path: the one answer every command gives.

A command that takes a model (``generate``, ``chat``, ``serve``, ``eval``, ``predict``, ``test``,
``export``, ``plot attention``, ``explore``) and a decoder's ``model.init`` (``lm``, ``sft``) read one of
three kinds of path, told apart here by their files alone (nothing is loaded):

- ``"run"``: an attnkit run, a run folder (``checkpoints/best.ckpt``, else ``checkpoints/last.ckpt``)
  or a ``.ckpt`` file;
- ``"model_folder"``: an attnkit model folder (``attnkit.json``, written by ``attnkit import`` /
  ``attnkit export``);
- ``"hf_folder"``: a Hugging Face model folder (``config.json`` + weights) of a supported
  ``model_type`` (:data:`attnkit.interop.SUPPORTED_MODEL_TYPES`).

A folder with ``checkpoints/`` is a run even if it holds ``config.json`` too, and one with
``attnkit.json`` an attnkit model folder even with ``config.json`` beside it. Symbolic links are
followed (:attr:`ResolvedModel.path` stays the path as given). Anything else, a path that does not
exist, a file that is not a ``.ckpt``, an empty folder, a run without a checkpoint or a folder of no
kind, is a :class:`ModelPathError` whose message says what was found and lists the three kinds
(:func:`model_kinds`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from attnkit.errors import CheckpointError
from attnkit.interop import SUPPORTED_MODEL_TYPES
from attnkit.interop.export import INFO_FILE

__all__ = [
    "CHECKPOINT_NAMES",
    "HF_CONFIG",
    "ModelKind",
    "ModelPathError",
    "ResolvedModel",
    "model_kinds",
    "resolve_model",
]

ModelKind = Literal["run", "model_folder", "hf_folder"]
CHECKPOINT_NAMES = ("best.ckpt", "last.ckpt")
"""The checkpoints of a run folder's ``checkpoints/`` that stand for the run, in order of preference."""
HF_CONFIG = "config.json"
"""The file that makes a folder a Hugging Face model folder."""


class ModelPathError(CheckpointError, FileNotFoundError):
    """A path that holds no model attnkit reads (a :class:`CheckpointError` and a
    :class:`FileNotFoundError`); ``reason`` says what is there, the message also lists the kinds."""

    def __init__(self, path: Path, reason: str, role: str | None = None) -> None:
        prefix = f"{role}: " if role else ""
        super().__init__(f"{prefix}no model at {path}: {reason}. attnkit reads {model_kinds()}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class ResolvedModel:
    """What :func:`resolve_model` found.

    Attributes:
        kind: ``"run"``, ``"model_folder"`` (attnkit) or ``"hf_folder"`` (Hugging Face).
        path: the path as given (a run folder, a checkpoint file or a model folder).
        checkpoint: a run's checkpoint file (the file given, or the run folder's best, else last);
            ``None`` for a model folder.
        run_dir: a run's folder (``None`` for a model folder, and for a checkpoint file that is not in a
            run folder's ``checkpoints/``).
    """

    kind: ModelKind
    path: Path
    checkpoint: Path | None = None
    run_dir: Path | None = None

    @property
    def is_model_folder(self) -> bool:
        """Whether it is a model folder (attnkit's or Hugging Face's), not a run."""
        return self.kind != "run"


def model_kinds() -> str:
    """The kinds of path attnkit reads, in words (the end of every :class:`ModelPathError`)."""
    types = list(SUPPORTED_MODEL_TYPES)
    listed = ", ".join(types[:-1]) + f" or {types[-1]}" if len(types) > 1 else "".join(types)
    return (
        f"an attnkit run (a run folder with checkpoints/{CHECKPOINT_NAMES[0]} or {CHECKPOINT_NAMES[1]}, or a .ckpt "
        f"file), an attnkit model folder ({INFO_FILE}, written by `attnkit import` or `attnkit export`), or a "
        f"Hugging Face model folder ({HF_CONFIG} + weights) of model_type {listed}"
    )


def resolve_model(path: str | Path | ResolvedModel, *, role: str | None = None) -> ResolvedModel:
    """What is at ``path`` (see the module docstring); a :class:`ResolvedModel` is returned as it is.

    ``role``: what the path is for, put before the error message (``"model.init"``).
    """
    if isinstance(path, ResolvedModel):
        return path
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a model path is a str or a Path, got {type(path).__name__} {path!r}")
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise ModelPathError(path, f"a broken symbolic link (to {os.readlink(path)}, which does not exist)", role)
        raise ModelPathError(path, "nothing is there (no such file or folder)", role)
    if path.is_file():
        if path.suffix == ".ckpt":
            run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
            return ResolvedModel("run", path, checkpoint=path, run_dir=run_dir)
        folder = path.parent
        if (folder / INFO_FILE).is_file() or (folder / HF_CONFIG).is_file():
            raise ModelPathError(path, f"a file of the model folder {folder}; pass the folder itself", role)
        raise ModelPathError(path, "a file that is not a .ckpt checkpoint; pass a run or model folder", role)
    if not path.is_dir():
        raise ModelPathError(path, "neither a file nor a folder", role)
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir():
        for name in CHECKPOINT_NAMES:
            if (checkpoints / name).is_file():
                return ResolvedModel("run", path, checkpoint=checkpoints / name, run_dir=path)
        raise ModelPathError(path, _run_without_checkpoint(checkpoints), role)
    if (path / INFO_FILE).is_file():
        return ResolvedModel("model_folder", path)
    if (path / HF_CONFIG).is_file():
        return ResolvedModel("hf_folder", path)
    raise ModelPathError(path, _no_kind(path), role)


def _run_without_checkpoint(checkpoints: Path) -> str:
    others = sorted(p.name for p in checkpoints.glob("*.ckpt") if p.is_file())
    text = f"a run folder without {checkpoints.name}/{CHECKPOINT_NAMES[0]} or {CHECKPOINT_NAMES[1]}"
    if others:
        return f"{text} (its {checkpoints.name}/ holds {', '.join(others[:5])}: pass one of those files)"
    return f"{text} (it has saved no checkpoint yet)"


def _no_kind(folder: Path) -> str:
    entries = sorted(folder.iterdir())
    if not entries:
        return "an empty folder"
    ckpts = [p.name for p in entries if p.suffix == ".ckpt" and p.is_file()]
    if ckpts:
        return f"a folder of checkpoint files ({', '.join(ckpts[:5])}); pass one of them"
    inner = [
        p for p in entries if p.is_dir() and any((p / name).exists() for name in ("checkpoints", INFO_FILE, HF_CONFIG))
    ]
    text = f"a folder with neither checkpoints/ (a run) nor {INFO_FILE} or {HF_CONFIG} (a model folder)"
    if inner:  # e.g. runs/lm, which holds run folders
        return f"{text}; it holds {', '.join(str(p) for p in inner[-3:])}: pass one of those"
    return text
