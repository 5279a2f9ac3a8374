"""Checkpoint files: written atomically, loaded safely (``weights_only=True``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from attnkit.errors import CheckpointError
from attnkit.io import write_atomic, write_json_atomic

__all__ = ["AtomicCheckpointIO", "CheckpointError", "load_checkpoint_file", "write_atomic", "write_json_atomic"]


def load_checkpoint_file(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)``; clear errors for bad files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # corrupt bytes fail anywhere in torch.load (UnicodeDecodeError, KeyError, ...)
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is truncated or corrupt ({type(err).__name__}: {err}). "
            "Use another checkpoint of the run (best.ckpt / last.ckpt) or retrain."
        ) from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not an attnkit checkpoint (it holds a {type(data).__name__})")
    return data


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes to a temporary file and renames it into place,
    and loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        write_atomic(path, lambda tmp: torch.save(checkpoint, tmp))

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location or "cpu")
