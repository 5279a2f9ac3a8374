"""Arrays of ``.npz``/``.pt`` files (item features, labels, anomaly sets), checked with errors naming the file
and key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["feature_matrix", "label_vector", "read_arrays", "read_sets", "to_tensor"]


def read_arrays(path: Path) -> dict[str, Any]:
    """The arrays of a ``.npz`` or ``.pt`` file as a dict (not yet validated)."""
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays: dict[str, Any] = {k: npz[k] for k in npz.files}
        except Exception as err:
            raise ValueError(f"{path}: not a readable .npz file ({type(err).__name__}: {err})") from err
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            raise ValueError(
                f"{path}: not a readable .pt file of tensors (loaded with weights_only=True; "
                f"{type(err).__name__}: {err})"
            ) from err
        if not isinstance(obj, Mapping):
            raise ValueError(f"{path}: expected a dict of tensors (e.g. features, labels), got {type(obj).__name__}")
        arrays = {str(k): v for k, v in obj.items()}
    if not arrays:
        raise ValueError(f"{path}: the file is empty (no arrays); expected keys 'features' and 'labels'")
    return arrays


def to_tensor(value: Any, key: str, path: Path) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"dtype {arr.dtype}")
        return torch.from_numpy(np.ascontiguousarray(arr))
    except Exception as err:
        raise ValueError(f"{path}: {key!r} is not a numeric array ({err})") from err


def feature_matrix(value: Any, key: str, path: Path) -> Tensor:
    x = to_tensor(value, key, path)
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(f"{path}: {key!r} must hold real numbers, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{path}: {key!r} must be 2-D [N, D] (items x features), got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{path}: {key!r} is empty (shape {tuple(x.shape)}); it needs items and features")
    x = x.to(torch.float32)
    bad = ~torch.isfinite(x)
    if bad.any():
        row = int(torch.nonzero(bad.any(dim=1))[0])
        raise ValueError(
            f"{path}: {key!r} has {int(bad.sum())} non-finite values (NaN or inf in float32), first in row {row}"
        )
    return x


def label_vector(value: Any, key: str, path: Path, n: int, features_key: str) -> Tensor:
    y = to_tensor(value, key, path)
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{path}: {key!r} must hold integer class labels, got dtype {y.dtype}")
    if y.ndim != 1:
        raise ValueError(f"{path}: {key!r} must be 1-D [N], got shape {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{path}: {key!r} has {y.shape[0]} labels but {features_key!r} has {n} items")
    return y.to(torch.int64)


def read_sets(path: str | Path) -> tuple[Tensor, Tensor | None]:
    """``(sets [S, N, D] float32, targets [S] int64 or None)`` of a ``.npz``/``.pt`` file holding
    ``sets`` (and optionally ``targets``: each set's odd position), or a ``.pt`` file of one tensor."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"anomaly: {path} is neither a test-set index nor a file")
    if path.suffix.lower() == ".npz":
        arrays = read_arrays(path)
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            raise ValueError(f"{path}: not a readable .pt file of tensors ({type(err).__name__}: {err})") from err
        arrays = {str(k): v for k, v in obj.items()} if isinstance(obj, Mapping) else {"sets": obj}
    if "sets" not in arrays:
        raise ValueError(
            f"{path}: expected an array 'sets' [S, N, D] (and optionally 'targets' [S]), found {sorted(arrays)}"
        )
    sets = to_tensor(arrays["sets"], "sets", path)
    if sets.dim() != 3 or sets.dtype == torch.bool or sets.is_complex():
        raise ValueError(f"{path}: 'sets' must be real numbers [num_sets, set_size, features], got {tuple(sets.shape)}")
    targets = None
    if "targets" in arrays:
        targets = label_vector(arrays["targets"], "targets", path, len(sets), "sets")
        if targets.numel() and (targets.min() < 0 or targets.max() >= sets.shape[1]):
            raise ValueError(f"{path}: 'targets' must be positions in [0, {sets.shape[1]}) of the sets' odd items")
    return sets.to(torch.float32), targets
