"""Checkpoint files: written atomically, loaded safely (``weights_only=True``) and only when every byte
of their contents is as written.

A checkpoint is ``torch.save``'s zip file, which records a CRC-32 of every entry (the pickle and each
tensor's bytes); ``torch.load`` does not check them, so a flipped bit in a tensor loads silently as
another weight. :func:`load_checkpoint_file` checks every entry's CRC-32 first (about as fast as reading
the file); an entry recorded with a CRC of 0 (``torch.serialization.set_crc32_options(False)``) is not
checked.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from attnkit.errors import CheckpointError
from attnkit.io import write_atomic, write_json_atomic

__all__ = [
    "AtomicCheckpointIO",
    "CheckpointError",
    "check_crcs",
    "load_checkpoint_file",
    "write_atomic",
    "write_json_atomic",
]


def load_checkpoint_file(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)`` once its entries' CRC-32s are checked;
    clear errors for bad files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    try:
        check_crcs(path)
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # corrupt bytes fail anywhere in torch.load (UnicodeDecodeError, KeyError, ...)
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is truncated or corrupt ({type(err).__name__}: {err}). "
            "Use another checkpoint of the run (best.ckpt / last.ckpt) or retrain."
        ) from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not an attnkit checkpoint (it holds a {type(data).__name__})")
    return data


def check_crcs(path: Path) -> None:
    """Read every entry of the zip file ``path`` (the ones recorded with a CRC-32); ``zipfile`` raises
    ``BadZipFile`` for one whose bytes do not match it. A file that is not a zip file (``torch.save``'s
    format before PyTorch 1.6) is left to ``torch.load``."""
    if not zipfile.is_zipfile(path):
        return
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.CRC == 0:
                continue
            with archive.open(info) as entry:
                while entry.read(1 << 24):
                    pass


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes to a temporary file and renames it into place,
    and loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        write_atomic(path, lambda tmp: torch.save(checkpoint, tmp))

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location or "cpu")
