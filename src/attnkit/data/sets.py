"""Set anomaly detection data: find the odd one out in a set of item feature vectors.

Each example is a set of ``set_size`` items: ``set_size - 1`` items of one class and one item of
another class, in random order. The target is the position of the odd item (a softmax over set
positions), as in the UvA deep learning tutorial on Transformers.

Item features come from scikit-learn's bundled handwritten digits, a user ``.npz``/``.pt`` file, or
CIFAR-100 images passed through a frozen CNN (see :mod:`attnkit.data.readers.cifar`). Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from attnkit.data.base import DataConfig, EvalBatches, process_shard
from attnkit.data.splits import group_split

__all__ = [
    "AnomalyDataConfig",
    "EpochShuffleSampler",
    "ItemFeatures",
    "SetAnomalyDataModule",
    "SetAnomalyDataset",
    "build_anomaly_sets",
    "load_item_features",
    "per_class_split",
    "read_sets",
    "read_test_sets",
    "standardize_item_features",
    "standardize_like_run",
]

_FILE_SUFFIXES = (".npz", ".pt", ".pth")
_SPLITS = ("train", "val", "test")


# ----------------------------------------------------------------------------------------------
# configuration


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class AnomalyDataConfig(DataConfig):
    """Where item features come from and how sets are built.

    ``source`` is ``"digits"`` (scikit-learn's bundled 8x8 handwritten digits: 64 features, 10 classes),
    a ``.npz``/``.pt`` file, or a CIFAR-100 folder (``cifar-100-python`` of the official python release).
    """

    source: str = Field("digits", description="'digits', a .npz/.pt file of features or a CIFAR-100 folder")
    set_size: int = Field(10, ge=2, description="items per set: set_size - 1 normal items and the anomaly")
    train_sets: int | None = Field(
        None, ge=1, description="sets per training epoch; default: training items // set_size"
    )
    val_sets: int = Field(1000, ge=1, description="fixed, seeded")
    test_sets: int = Field(2000, ge=1, description="fixed, seeded")
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0, description="per-class share of training items for validation")
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="per-class share held out (no test split given)")
    seed: int = 42
    standardize: bool = Field(True, description="z-score features with the training statistics")
    group_column: str | None = Field(
        None,
        min_length=1,
        description=".npz/.pt files: the array holding each item's group; no group is split between train/val/test",
    )
    # CIFAR-100 only:
    feature_cache: str | None = Field(
        None, min_length=1, description="default: <cifar folder>/attnkit_features_<backbone>.pt"
    )
    backbone: str = Field(
        "resnet34", pattern=r"^[A-Za-z0-9_.-]+$", description="torchvision model name such as 'resnet34'"
    )
    backbone_weights: str | None = Field(
        None, min_length=1, description="local torchvision state dict; never downloaded"
    )
    image_size: int = Field(224, ge=8)
    batch_size_features: int = Field(128, ge=1)
    feature_device: str | None = Field(None, description="where the backbone runs; None: cuda if available, else cpu")

    @model_validator(mode="after")
    def _check(self) -> AnomalyDataConfig:
        if not self.source.strip():
            raise ValueError("source must be 'digits', a path to a .npz/.pt file or a CIFAR-100 folder")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be < 1 to leave training items, got "
                f"{self.val_fraction} + {self.test_fraction}"
            )
        if self.feature_device is not None:
            try:
                torch.device(self.feature_device)
            except (RuntimeError, TypeError) as err:
                raise ValueError(
                    f"feature_device must be None or a torch device such as 'cpu' or 'cuda:0', "
                    f"got {self.feature_device!r}"
                ) from err
        return self


# ----------------------------------------------------------------------------------------------
# item features


@dataclass
class ItemFeatures:
    """Item feature vectors and integer class labels for the train/val/test splits.

    ``*_x`` are float32 ``[N, D]`` and ``*_y`` int64 ``[N]`` with labels ``0 .. num_classes - 1``.
    ``*_index`` give, where a split was cut from a larger pool, the items' rows in that pool (the
    digits data, the file's ``features``/``train_features``, the CIFAR-100 ``train``/``test`` pickle).
    ``mean``/``std`` ``[D]`` are set when the features were standardised with them.
    """

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    feature_dim: int
    class_names: list[str] | None = None
    source: str = ""
    train_index: Tensor | None = None
    val_index: Tensor | None = None
    test_index: Tensor | None = None
    mean: Tensor | None = None
    std: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in _SPLITS:
            x, y = getattr(self, f"{split}_x"), getattr(self, f"{split}_y")
            if x.ndim != 2 or x.shape[1] != self.feature_dim or y.shape != (x.shape[0],):
                raise ValueError(
                    f"{split}: expected x [N, {self.feature_dim}] and y [N], got {tuple(x.shape)} and {tuple(y.shape)}"
                )

    def split(self, name: str) -> tuple[Tensor, Tensor]:
        """``(x [N, D], y [N])`` of split ``"train"``, ``"val"`` or ``"test"``."""
        if name not in _SPLITS:
            raise ValueError(f"split must be one of {_SPLITS}, got {name!r}")
        return getattr(self, f"{name}_x"), getattr(self, f"{name}_y")


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def per_class_split(labels: Tensor, fraction: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Split positions ``0 .. N-1`` per class: ``(kept [N - M], held_out [M])``, both sorted.

    Each class with ``n`` items gives ``round(n * fraction)`` random items to the held-out part, but
    always keeps at least one.
    """
    kept: list[Tensor] = []
    held: list[Tensor] = []
    for c in torch.unique(labels).tolist():
        idx = torch.nonzero(labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        k = min(_round_half_up(len(idx) * fraction), len(idx) - 1)
        held.append(idx[:k])
        kept.append(idx[k:])
    return torch.sort(torch.cat(kept)).values, torch.sort(torch.cat(held)).values


def _count_table(y: Tensor) -> dict[int, int]:
    values, counts = torch.unique(y, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def _check_pool(y: Tensor, set_size: int, where: str, class_names: list[str] | None = None) -> None:
    """Every class of the pool the training sets are drawn from needs ``set_size - 1`` items; >= 2 classes."""
    counts = _count_table(y)
    if len(counts) < 2:
        raise ValueError(f"{where}: needs items of at least 2 classes to build anomaly sets, found {len(counts)}")
    small = {c: n for c, n in counts.items() if n < set_size - 1}
    if small:
        c, n = min(small.items(), key=lambda kv: kv[1])
        name = f"class {c!r}" + (f" ({class_names[c]!r})" if class_names and 0 <= c < len(class_names) else "")
        raise ValueError(
            f"{where}: {name} has only {n} items but sets of set_size={set_size} need {set_size - 1} items of one "
            f"class; too small: {len(small)} class(es) {sorted(small)[:10]}. Use a smaller set_size "
            "or drop these classes."
        )


def _check_split(y: Tensor, set_size: int, split: str, where: str) -> None:
    """A split can host sets if it has >= 2 classes and one class with ``set_size - 1`` items."""
    counts = _count_table(y)
    if len(counts) < 2:
        raise ValueError(f"{where}: the {split} split has items of {len(counts)} class(es); sets need at least 2")
    if max(counts.values()) < set_size - 1:
        hint = {"val": "val_fraction", "test": "test_fraction"}.get(split)
        raise ValueError(
            f"{where}: no class of the {split} split has the {set_size - 1} items a set of set_size={set_size} "
            f"needs (largest class: {max(counts.values())} items). Use a smaller set_size"
            + (f" or a larger {hint}." if hint else ".")
        )


def _remap_labels(splits: dict[str, Tensor]) -> tuple[dict[str, Tensor], Tensor]:
    """Map the labels of all splits onto ``0 .. K-1`` (sorted original values); returns them and the originals."""
    values = torch.unique(torch.cat(list(splits.values())))
    return {k: torch.searchsorted(values, y).to(torch.int64) for k, y in splits.items()}, values


def _split_pool(
    x: Tensor,
    y: Tensor,
    cfg: AnomalyDataConfig,
    generator: torch.Generator,
    *,
    need_test: bool,
    need_val: bool,
    groups: np.ndarray | None = None,
    where: str = "the data",
) -> dict[str, tuple[Tensor, Tensor, Tensor]]:
    """Cut test (``test_fraction``) then val (``val_fraction`` of the rest) from a pool, per class;
    with ``groups`` (one per item) whole groups, stratified by class (:func:`attnkit.data.splits.group_split`)."""
    if groups is not None:
        fractions = [cfg.test_fraction if need_test else 0.0, 0.0]
        fractions[1] = cfg.val_fraction * (1.0 - fractions[0]) if need_val else 0.0
        seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
        rest_idx, test_idx, val_idx = (
            torch.from_numpy(i) for i in group_split(groups, fractions, seed, stratify=y, where=where)
        )
        parts = {"train": rest_idx} | ({"test": test_idx} if need_test else {}) | ({"val": val_idx} if need_val else {})
        return {split: (x[idx], y[idx], idx) for split, idx in parts.items()}
    out: dict[str, tuple[Tensor, Tensor, Tensor]] = {}
    rest = torch.arange(len(y))
    if need_test:
        kept, held = per_class_split(y, cfg.test_fraction, generator)
        out["test"] = (x[held], y[held], held)
        rest = kept
    if need_val:
        kept, held = per_class_split(y[rest], cfg.val_fraction, generator)
        out["val"] = (x[rest[held]], y[rest[held]], rest[held])
        rest = rest[kept]
    out["train"] = (x[rest], y[rest], rest)
    return out


def _groups(arrays: Mapping[str, Any], cfg: AnomalyDataConfig, path: Path, key: str, n: int) -> np.ndarray | None:
    """The per-item groups named by ``data.group_column`` (an array of the file), or None."""
    if cfg.group_column is None:
        return None
    if cfg.group_column not in arrays:
        raise ValueError(
            f"{path}: data.group_column={cfg.group_column!r} names no array of the file; arrays: {sorted(arrays)}"
        )
    groups = _to_tensor(arrays[cfg.group_column], cfg.group_column, path).numpy()
    if groups.shape != (n,):
        raise ValueError(
            f"{path}: {cfg.group_column!r} must hold one group per item of {key!r} ({n}), got shape {groups.shape}"
        )
    return groups


def _assemble(
    splits: dict[str, tuple[Tensor, Tensor, Tensor | None]],
    cfg: AnomalyDataConfig,
    where: str,
    *,
    source: str,
    class_names: list[str] | None = None,
    info: dict[str, Any] | None = None,
) -> ItemFeatures:
    """Remap labels, check every split can host sets and build :class:`ItemFeatures`."""
    labels, values = _remap_labels({k: v[1] for k, v in splits.items()})
    if class_names is not None:
        class_names = [class_names[v] if 0 <= v < len(class_names) else str(v) for v in values.tolist()]
    for split in _SPLITS:
        _check_split(labels[split], cfg.set_size, split, where)
    feature_dim = splits["train"][0].shape[1]
    return ItemFeatures(
        train_x=splits["train"][0].float().contiguous(),
        train_y=labels["train"],
        val_x=splits["val"][0].float().contiguous(),
        val_y=labels["val"],
        test_x=splits["test"][0].float().contiguous(),
        test_y=labels["test"],
        num_classes=len(values),
        feature_dim=int(feature_dim),
        class_names=class_names,
        source=source,
        train_index=splits["train"][2],
        val_index=splits["val"][2],
        test_index=splits["test"][2],
        info={"labels": values.tolist(), **(info or {})},
    )


def _load_digits(cfg: AnomalyDataConfig, generator: torch.Generator) -> ItemFeatures:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.as_tensor(digits.data, dtype=torch.float32)
    y = torch.as_tensor(digits.target, dtype=torch.int64)
    where = "digits (scikit-learn)"
    _check_pool(y, cfg.set_size, where)
    splits = _split_pool(x, y, cfg, generator, need_test=True, need_val=True)
    return _assemble(splits, cfg, where, source="digits", class_names=[str(int(n)) for n in digits.target_names])


def _read_arrays(path: Path) -> dict[str, Any]:
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


def _to_tensor(value: Any, key: str, path: Path) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"dtype {arr.dtype}")
        return torch.from_numpy(np.ascontiguousarray(arr))
    except Exception as err:
        raise ValueError(f"{path}: {key!r} is not a numeric array ({err})") from err


def _features(value: Any, key: str, path: Path) -> Tensor:
    x = _to_tensor(value, key, path)
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


def _labels(value: Any, key: str, path: Path, n: int, features_key: str) -> Tensor:
    y = _to_tensor(value, key, path)
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{path}: {key!r} must hold integer class labels, got dtype {y.dtype}")
    if y.ndim != 1:
        raise ValueError(f"{path}: {key!r} must be 1-D [N], got shape {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{path}: {key!r} has {y.shape[0]} labels but {features_key!r} has {n} items")
    return y.to(torch.int64)


def _load_file(path: Path, cfg: AnomalyDataConfig, generator: torch.Generator) -> ItemFeatures:
    arrays = _read_arrays(path)
    keys = sorted(arrays)
    plain = {"features", "labels"} & set(arrays)
    split_keys = {k for k in arrays if re.fullmatch(r"(train|val|test)_(features|labels)", k)}
    expected = (
        "expected 'features' [N, D] and 'labels' [N], or a fixed split 'train_features', 'train_labels' "
        "(+ optional 'val_features', 'val_labels', 'test_features', 'test_labels')"
    )
    if plain and split_keys:
        raise ValueError(f"{path}: has both {sorted(plain)} and split keys {sorted(split_keys)}; {expected}")
    if split_keys:
        for split in _SPLITS:
            pair = {f"{split}_features", f"{split}_labels"}
            if pair & split_keys and not pair <= split_keys:
                missing = sorted(pair - split_keys)
                raise ValueError(f"{path}: missing key(s) {missing} (found keys {keys}); {expected}")
        if "train_features" not in arrays:
            raise ValueError(f"{path}: missing keys ['train_features', 'train_labels'] (found keys {keys}); {expected}")
        given = [s for s in _SPLITS if f"{s}_features" in arrays]
    else:
        if plain != {"features", "labels"}:
            missing = sorted({"features", "labels"} - plain)
            raise ValueError(f"{path}: missing key(s) {missing} (found keys {keys}); {expected}")
        given = []

    if not given:
        x = _features(arrays["features"], "features", path)
        y = _labels(arrays["labels"], "labels", path, len(x), "features")
        _check_pool(y, cfg.set_size, str(path))
        groups = _groups(arrays, cfg, path, "features", len(x))
        splits: dict[str, tuple[Tensor, Tensor, Tensor | None]] = dict(
            _split_pool(x, y, cfg, generator, need_test=True, need_val=True, groups=groups, where=str(path))
        )
    else:
        loaded = {}
        for split in given:
            fx, fy = f"{split}_features", f"{split}_labels"
            x = _features(arrays[fx], fx, path)
            loaded[split] = (x, _labels(arrays[fy], fy, path, len(x), fx))
        dims = {split: xy[0].shape[1] for split, xy in loaded.items()}
        if len(set(dims.values())) > 1:
            raise ValueError(f"{path}: the splits have different feature sizes {dims}")
        train_x, train_y = loaded["train"]
        _check_pool(train_y, cfg.set_size, str(path))
        groups = _groups(arrays, cfg, path, "train_features", len(train_x))
        need_test, need_val = "test" not in loaded, "val" not in loaded
        splits = dict(
            _split_pool(
                train_x, train_y, cfg, generator, need_test=need_test, need_val=need_val, groups=groups, where=str(path)
            )
        )
        for split in given:
            if split != "train":
                splits[split] = (*loaded[split], None)
    return _assemble(splits, cfg, str(path), source=str(path), info={"given_splits": given})


def _load_cifar(
    folder: Path, cfg: AnomalyDataConfig, generator: torch.Generator, backbone: nn.Module | None
) -> ItemFeatures:
    from attnkit.data.readers.cifar import load_cifar100_features

    out = load_cifar100_features(
        folder,
        backbone=backbone,
        backbone_name=cfg.backbone,
        backbone_weights=cfg.backbone_weights,
        image_size=cfg.image_size,
        batch_size=cfg.batch_size_features,
        feature_cache=cfg.feature_cache,
        device=cfg.feature_device,
    )
    where = f"CIFAR-100 folder {folder}"
    train_y = out["train_labels"]
    _check_pool(train_y, cfg.set_size, where, out["class_names"])
    splits: dict[str, tuple[Tensor, Tensor, Tensor | None]] = dict(
        _split_pool(out["train_features"], train_y, cfg, generator, need_test=False, need_val=True)
    )
    splits["test"] = (out["test_features"], out["test_labels"], torch.arange(len(out["test_labels"])))
    info = {"backbone": out["backbone"], "feature_cache": out["cache_path"], "from_cache": out["from_cache"]}
    return _assemble(splits, cfg, where, source=str(folder), class_names=out["class_names"], info=info)


def standardize_item_features(features: ItemFeatures, eps: float = 1e-6) -> ItemFeatures:
    """Z-score every split with the training mean/std ``[D]`` (constant features: std 1); sets ``mean``/``std``."""
    mean = features.train_x.mean(dim=0)
    std = features.train_x.std(dim=0, unbiased=False)
    std = torch.where(std < eps, torch.ones_like(std), std)
    return dataclasses.replace(
        features,
        train_x=(features.train_x - mean) / std,
        val_x=(features.val_x - mean) / std,
        test_x=(features.test_x - mean) / std,
        mean=mean,
        std=std,
    )


def load_item_features(cfg: AnomalyDataConfig, *, backbone: nn.Module | None = None) -> ItemFeatures:
    """Load (and, with ``cfg.standardize``, standardise) the item features of ``cfg.source``.

    Splits cut from a pool are per class and seeded by ``cfg.seed``. ``backbone`` (a module mapping
    ``[B, 3, H, W] -> [B, D]``) replaces torchvision's ``cfg.backbone`` for a CIFAR-100 folder.
    """
    if not isinstance(cfg, AnomalyDataConfig):
        raise TypeError(f"cfg must be an AnomalyDataConfig, got {type(cfg).__name__}")
    generator = torch.Generator().manual_seed(_mix_seed(cfg.seed, 0x5B117))
    source = cfg.source
    if source == "digits":
        kind = "digits"
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            from attnkit.data.readers.cifar import find_cifar100_folder

            folder = find_cifar100_folder(path)
            assert folder is not None
            kind = "cifar"
        elif path.suffix.lower() in _FILE_SUFFIXES:
            if not path.is_file():
                raise FileNotFoundError(f"features file {path} does not exist")
            kind = "file"
        elif path.exists():
            raise ValueError(f"{path}: unsupported file type; use a .npz or .pt file, or a CIFAR-100 folder")
        else:
            raise FileNotFoundError(
                f"source {source!r} is not 'digits' and no such file or folder exists "
                "(expected a .npz/.pt file or a CIFAR-100 folder)"
            )
    if cfg.group_column is not None and kind != "file":
        raise ValueError(
            f"data.group_column={cfg.group_column!r} names an array of a .npz/.pt features file; "
            f"source {source!r} has no groups (leave group_column unset)"
        )
    if backbone is not None and kind != "cifar":
        raise ValueError(f"backbone= is only used with a CIFAR-100 folder source, not with {source!r}")
    if kind == "digits":
        features = _load_digits(cfg, generator)
    elif kind == "file":
        features = _load_file(path, cfg, generator)
    else:
        features = _load_cifar(folder, cfg, generator, backbone)
    return standardize_item_features(features) if cfg.standardize else features


def standardize_like_run(
    x: Tensor, artifacts: Mapping[str, Any], *, standardized: bool = False, where: str = "input"
) -> Tensor:
    """Raw item features ``x [..., D]`` as a run's model saw them in training: z-scored with the
    training mean/std stored in the run's data ``artifacts`` (:meth:`SetAnomalyDataModule.artifacts`),
    or unchanged (as float32) when the run did not standardise or ``standardized`` says ``x``
    already is. A feature count other than the run's is an error naming ``where``."""
    x = x.to(torch.float32)
    dim = artifacts.get("feature_dim")
    if dim is not None and x.shape[-1] != int(dim):
        raise ValueError(f"{where}: items have {x.shape[-1]} features but this run was trained on {dim}")
    if standardized or not artifacts.get("standardize"):
        return x
    mean, std = artifacts.get("mean"), artifacts.get("std")
    if mean is None or std is None:
        raise ValueError(
            f"{where}: the run standardised its features but stores no mean/std; standardise the input yourself "
            "and say so (--standardized / standardized=True)"
        )
    return (x - torch.tensor(mean, dtype=torch.float32)) / torch.tensor(std, dtype=torch.float32)


def read_sets(path: str | Path) -> tuple[Tensor, Tensor | None]:
    """``(sets [S, N, D] float32, targets [S] int64 or None)`` of a ``.npz``/``.pt`` file holding
    ``sets`` (and optionally ``targets``: each set's odd position), or a ``.pt`` file of one tensor."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"anomaly: {path} is neither a test-set index nor a file")
    if path.suffix.lower() == ".npz":
        arrays = _read_arrays(path)
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
    sets = _to_tensor(arrays["sets"], "sets", path)
    if sets.dim() != 3 or sets.dtype == torch.bool or sets.is_complex():
        raise ValueError(f"{path}: 'sets' must be real numbers [num_sets, set_size, features], got {tuple(sets.shape)}")
    targets = None
    if "targets" in arrays:
        targets = _labels(arrays["targets"], "targets", path, len(sets), "sets")
        if targets.numel() and (targets.min() < 0 or targets.max() >= sets.shape[1]):
            raise ValueError(f"{path}: 'targets' must be positions in [0, {sets.shape[1]}) of the sets' odd items")
    return sets.to(torch.float32), targets


def read_test_sets(path: str | Path, *, set_size: int, num_sets: int, seed: int) -> tuple[Tensor, Tensor]:
    """Labelled anomaly sets of a user file, for evaluation: ``(sets [S, N, D], targets [S])``.

    The file (``.npz``/``.pt``) holds either fixed sets, ``sets [S, N, D]`` with ``targets [S]``
    (the odd item's position), or items, ``features [N, D]`` with class ``labels [N]``, from which
    ``num_sets`` fixed sets of ``set_size`` are drawn with ``seed`` (as a run's test split is).
    Features are returned as stored (see :func:`standardize_like_run`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"anomaly: evaluation file {path} does not exist")
    arrays = _read_arrays(path)
    if "sets" in arrays:
        sets, targets = read_sets(path)
        if targets is None:
            raise ValueError(f"{path}: has 'sets' but no 'targets' [S] (each set's odd position) to score against")
        return sets, targets
    if not {"features", "labels"} <= set(arrays):
        raise ValueError(
            f"{path}: expected 'features' [N, D] with 'labels' [N], or 'sets' [S, N, D] with 'targets' [S]; "
            f"found {sorted(arrays)}"
        )
    x = _features(arrays["features"], "features", path)
    y = _labels(arrays["labels"], "labels", path, len(x), "features")
    _check_split(y, set_size, "evaluation", str(path))
    dataset = SetAnomalyDataset(x, y, set_size, num_sets, seed=_mix_seed(seed, 3), fixed=True)
    items, targets = dataset.epoch_sets()
    return x[items], targets.clone()


# ----------------------------------------------------------------------------------------------
# sets

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _mix_seed(*values: int) -> int:
    """A 63-bit seed that depends on every value (so (seed, epoch, index) streams do not collide)."""
    h = 0x243F6A8885A308D3
    for v in values:
        h = _splitmix64(h ^ (int(v) & _MASK64))
    return h >> 1


class _ClassTable:
    """Items grouped by class: class ``c`` (``classes[c]``) owns ``order[start[c] : start[c] + count[c]]``."""

    def __init__(self, labels: Tensor) -> None:
        self.classes, self.count = torch.unique(labels, return_counts=True)
        self.order = torch.argsort(labels, stable=True)
        self.start = torch.cumsum(self.count, 0) - self.count


def build_anomaly_sets(
    labels: Tensor, set_size: int, num_sets: int, generator: torch.Generator, *, max_elements: int = 1 << 22
) -> tuple[Tensor, Tensor]:
    """Draw ``num_sets`` anomaly sets from items with ``labels [N]``, vectorised.

    For each set: a class ``c`` uniformly among the classes with ``set_size - 1`` items, ``set_size - 1``
    distinct items of ``c``, one item of a uniformly chosen other class, then a random order.

    Returns:
        ``(items [num_sets, set_size], target [num_sets])`` int64: item rows and the anomaly's position.
    """
    return _build_sets(_ClassTable(labels), set_size, num_sets, generator, max_elements=max_elements)


def _build_sets(
    table: _ClassTable, set_size: int, num_sets: int, generator: torch.Generator, *, max_elements: int = 1 << 22
) -> tuple[Tensor, Tensor]:
    m = set_size - 1
    k = len(table.classes)
    eligible = torch.nonzero(table.count >= m).flatten()
    if k < 2 or len(eligible) == 0:
        raise ValueError(
            f"cannot build sets of set_size={set_size}: need >= 2 classes and one with >= {m} items, "
            f"got class sizes {table.count.tolist()}"
        )
    max_count = int(table.count[eligible].max())
    chunk = max(1, max_elements // max_count)
    items_out, target_out = [], []
    for s0 in range(0, num_sets, chunk):
        s = min(chunk, num_sets - s0)
        # normal class and m distinct members: the m smallest of random keys over its (padded) member slots
        c = eligible[torch.randint(len(eligible), (s,), generator=generator)]
        keys = torch.rand(s, max_count, generator=generator)
        keys.masked_fill_(torch.arange(max_count) >= table.count[c].unsqueeze(1), 2.0)
        slots = torch.topk(keys, m, dim=1, largest=False, sorted=False).indices  # [s, m]
        normal = table.order[table.start[c].unsqueeze(1) + slots]
        # anomaly: a uniformly chosen other class, then a uniform member of it
        a = (c + 1 + torch.randint(k - 1, (s,), generator=generator)) % k
        j = (torch.rand(s, generator=generator) * table.count[a]).long().clamp_max_(table.count[a] - 1)
        anomaly = table.order[table.start[a] + j]
        # shuffle positions; the anomaly sits at column m before shuffling
        sets = torch.cat([normal, anomaly.unsqueeze(1)], dim=1)
        perm = torch.argsort(torch.rand(s, set_size, generator=generator), dim=1)
        items_out.append(torch.gather(sets, 1, perm))
        target_out.append(torch.argmax((perm == m).to(torch.int64), dim=1))
    return torch.cat(items_out), torch.cat(target_out)


class SetAnomalyDataset(Dataset[tuple[Tensor, Tensor]]):
    """Anomaly sets over item ``features [N, D]`` with class ``labels [N]``.

    Item ``i`` is ``(x [set_size, D] float32, target int64 scalar)``: ``x[target]`` is the one item of a
    different class. ``fixed=True`` draws all sets once from ``seed`` (same sets every epoch and run).
    ``fixed=False`` draws new sets every epoch: set ``i`` of epoch ``e`` is a function of ``(seed, e, i)``
    only (row ``i`` of the epoch's sets, drawn vectorised with a local generator seeded by ``(seed, e)``
    on first access and kept for that epoch), so every epoch is reproducible and the global RNG is
    untouched. Index with ``(epoch, i)`` to override the epoch selected by :meth:`set_epoch`.
    """

    def __init__(
        self, features: Tensor, labels: Tensor, set_size: int, num_sets: int, *, seed: int, fixed: bool
    ) -> None:
        _check_int("set_size", set_size, 2)
        _check_int("num_sets", num_sets, 1)
        if features.ndim != 2 or labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise ValueError(
                f"expected features [N, D] and labels [N], got {tuple(features.shape)} and {tuple(labels.shape)}"
            )
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
        self.features = features.to(torch.float32)
        self.labels = labels.to(torch.int64)
        self.set_size = int(set_size)
        self.num_sets = int(num_sets)
        self.seed = int(seed)
        self.fixed = bool(fixed)
        self.epoch = 0
        self._table = _ClassTable(self.labels)
        self.items: Tensor | None = None  # [num_sets, set_size] item rows when fixed
        self.targets: Tensor | None = None  # [num_sets]
        self._epoch_cache: tuple[int, Tensor, Tensor] | None = None
        if self.fixed:
            generator = torch.Generator().manual_seed(_mix_seed(self.seed, 0xF1CED))
            self.items, self.targets = _build_sets(self._table, self.set_size, self.num_sets, generator)
        else:  # fail now rather than in a worker
            self.epoch_sets(0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose sets ``fixed=False`` draws (no effect when fixed)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_sets

    def epoch_sets(self, epoch: int | None = None) -> tuple[Tensor, Tensor]:
        """All sets of ``epoch`` (default: the current one): ``(items [num_sets, set_size], targets [num_sets])``.

        ``items`` are rows of ``features``; for ``fixed=True`` the fixed sets, whatever the epoch.
        """
        if self.fixed:
            assert self.items is not None and self.targets is not None
            return self.items, self.targets
        epoch = self.epoch if epoch is None else int(epoch)
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            generator = torch.Generator().manual_seed(_mix_seed(self.seed, epoch))
            self._epoch_cache = (epoch, *_build_sets(self._table, self.set_size, self.num_sets, generator))
        return self._epoch_cache[1], self._epoch_cache[2]

    def set_items(self, index: int, epoch: int | None = None) -> tuple[Tensor, Tensor]:
        """``(item rows [set_size], target)`` of set ``index`` (in ``epoch``, default the current one)."""
        if not -self.num_sets <= index < self.num_sets:
            raise IndexError(f"set index {index} out of range for {self.num_sets} sets")
        items, targets = self.epoch_sets(epoch)
        return items[index], targets[index]

    def __getitem__(self, index: int | tuple[int, int]) -> tuple[Tensor, Tensor]:
        if isinstance(index, tuple):
            epoch, i = index
            items, target = self.set_items(int(i), epoch)
        else:
            items, target = self.set_items(int(index))
        return self.features[items], target.clone()


class EpochShuffleSampler(DistributedSampler):
    """Shuffles the sets of ``dataset`` per epoch (seeded by ``(seed, epoch)``) and yields ``(epoch, index)``.

    Carrying the epoch in the index keeps random training sets reproducible per epoch even in
    DataLoader worker processes. Lightning calls :meth:`set_epoch` at every epoch start; it is
    forwarded to the dataset. With ``num_replicas > 1`` each rank gets every ``num_replicas``-th
    index of the shuffled order, all ranks as many: the last ``len % num_replicas`` sets of the
    epoch's order are left out (``drop_last`` of :class:`DistributedSampler`), so the shards are
    disjoint.
    """

    def __init__(
        self,
        dataset: SetAnomalyDataset,
        seed: int,
        *,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:  # type: ignore[override]
        n = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            generator = torch.Generator().manual_seed(_mix_seed(self.seed, self.epoch, 0x5A3B1E))
            order = torch.randperm(n, generator=generator).tolist()
        else:
            order = list(range(n))
        if self.total_size > n:
            order += (order * math.ceil(self.total_size / n))[: self.total_size - n]
        epoch = self.epoch
        for i in order[self.rank : self.total_size : self.num_replicas]:
            yield epoch, i


# ----------------------------------------------------------------------------------------------
# Lightning


class SetAnomalyDataModule(L.LightningDataModule):
    """Set anomaly data for Lightning: batches ``(x [B, set_size, D] float32, y [B] int64)``.

    Training sets are redrawn every epoch (reproducibly from ``(cfg.seed, epoch)``); validation and
    test sets are fixed. ``backbone`` is passed to :func:`load_item_features` (CIFAR-100 only).
    """

    def __init__(
        self,
        cfg: AnomalyDataConfig,
        batch_size: int = 64,
        num_workers: int = 0,
        backbone: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(cfg, AnomalyDataConfig):
            raise TypeError(f"cfg must be an AnomalyDataConfig, got {type(cfg).__name__}")
        _check_int("batch_size", batch_size, 1)
        _check_int("num_workers", num_workers, 0)
        self.cfg = cfg
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.backbone = backbone
        self.features: ItemFeatures | None = None
        self.train_dataset: SetAnomalyDataset | None = None
        self.val_dataset: SetAnomalyDataset | None = None
        self.test_dataset: SetAnomalyDataset | None = None
        self._train_sampler: EpochShuffleSampler | None = None

    def prepare_data(self) -> None:
        """For a CIFAR-100 folder, extract and cache the features once (rank 0 in distributed runs)."""
        if self.cfg.source != "digits" and Path(self.cfg.source).expanduser().is_dir() and self.features is None:
            self.features = load_item_features(self.cfg, backbone=self.backbone)

    def setup(self, stage: str | None = None) -> None:
        """Load the item features (once) and build the train/val/test set datasets."""
        if self.features is None:
            self.features = load_item_features(self.cfg, backbone=self.backbone)
        if self.train_dataset is not None:
            return
        f, cfg = self.features, self.cfg
        train_sets = cfg.train_sets if cfg.train_sets is not None else max(1, len(f.train_y) // cfg.set_size)
        self.train_dataset = SetAnomalyDataset(
            f.train_x, f.train_y, cfg.set_size, train_sets, seed=_mix_seed(cfg.seed, 1), fixed=False
        )
        self.val_dataset = SetAnomalyDataset(
            f.val_x, f.val_y, cfg.set_size, cfg.val_sets, seed=_mix_seed(cfg.seed, 2), fixed=True
        )
        self.test_dataset = SetAnomalyDataset(
            f.test_x, f.test_y, cfg.set_size, cfg.test_sets, seed=_mix_seed(cfg.seed, 3), fixed=True
        )

    def _require_setup(self) -> ItemFeatures:
        if self.features is None or self.train_dataset is None:
            raise RuntimeError("SetAnomalyDataModule: call setup() first")
        return self.features

    @property
    def feature_dim(self) -> int:
        """Size ``D`` of an item's feature vector."""
        return self._require_setup().feature_dim

    @property
    def set_size(self) -> int:
        """Items per set (= number of output positions)."""
        return self.cfg.set_size

    @property
    def num_classes(self) -> int:
        """Number of item classes in the data (not the model's output size, which is ``set_size``)."""
        return self._require_setup().num_classes

    def train_dataloader(self) -> DataLoader:
        self._require_setup()
        assert self.train_dataset is not None
        trainer = self.trainer
        world, rank = process_shard(self)
        sampler = EpochShuffleSampler(self.train_dataset, _mix_seed(self.cfg.seed, 4), num_replicas=world, rank=rank)
        sampler.set_epoch(int(trainer.current_epoch) if trainer is not None else 0)
        self._train_sampler = sampler
        return DataLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=False,
        )

    def _eval_loader(self, dataset: SetAnomalyDataset | None, split: str) -> DataLoader:
        """The sets in order; in a multi-process run each process gets its :class:`EvalBatches`."""
        self._require_setup()
        assert dataset is not None
        world, rank = process_shard(self)
        if world > 1:
            batches = EvalBatches(len(dataset), self.batch_size, world, rank, split)
            return DataLoader(dataset, batch_sampler=batches, num_workers=self.num_workers)
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_dataset, "val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_dataset, "test")

    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable description of the data to save with a run (incl. the standardisation)."""
        f = self._require_setup()
        return {
            "task": "set_anomaly",
            "source": self.cfg.source,
            "feature_dim": f.feature_dim,
            "set_size": self.cfg.set_size,
            "num_classes": f.num_classes,
            "class_names": f.class_names,
            "num_items": {"train": len(f.train_y), "val": len(f.val_y), "test": len(f.test_y)},
            "num_sets": {
                "train": len(self.train_dataset or ()),
                "val": self.cfg.val_sets,
                "test": self.cfg.test_sets,
            },
            "standardize": self.cfg.standardize,
            "mean": f.mean.tolist() if f.mean is not None else None,
            "std": f.std.tolist() if f.std is not None else None,
            "info": {k: v for k, v in f.info.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
            "config": self.cfg.model_dump(),
        }
