"""Item features of the anomaly task: read from scikit-learn's digits, a ``.npz``/``.pt`` file or a
CIFAR-100 folder, split per class (or by group) and standardised."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.sets import SetAnomalyDataset, mix_seed
from attnkit.data.readers.arrays import feature_matrix, label_vector, read_arrays, read_sets, to_tensor
from attnkit.data.splits import group_split

__all__ = [
    "ItemFeatures",
    "check_split",
    "load_item_features",
    "per_class_split",
    "read_test_sets",
    "standardize_item_features",
    "standardize_like_run",
]

_FILE_SUFFIXES = (".npz", ".pt", ".pth")
_SPLITS = ("train", "val", "test")


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


def check_split(y: Tensor, set_size: int, split: str, where: str) -> None:
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
            torch.from_numpy(i) for i in group_split(groups, fractions, seed, stratify=y.numpy(), where=where)
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
    groups = to_tensor(arrays[cfg.group_column], cfg.group_column, path).numpy()
    if groups.shape != (n,):
        raise ValueError(
            f"{path}: {cfg.group_column!r} must hold one group per item of {key!r} ({n}), got shape {groups.shape}"
        )
    return groups


def _assemble(
    splits: Mapping[str, tuple[Tensor, Tensor, Tensor | None]],
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
        check_split(labels[split], cfg.set_size, split, where)
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


def _load_file(path: Path, cfg: AnomalyDataConfig, generator: torch.Generator) -> ItemFeatures:
    arrays = read_arrays(path)
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
        x = feature_matrix(arrays["features"], "features", path)
        y = label_vector(arrays["labels"], "labels", path, len(x), "features")
        _check_pool(y, cfg.set_size, str(path))
        groups = _groups(arrays, cfg, path, "features", len(x))
        splits: dict[str, tuple[Tensor, Tensor, Tensor | None]] = dict(
            _split_pool(x, y, cfg, generator, need_test=True, need_val=True, groups=groups, where=str(path))
        )
    else:
        loaded = {}
        for split in given:
            fx, fy = f"{split}_features", f"{split}_labels"
            x = feature_matrix(arrays[fx], fx, path)
            loaded[split] = (x, label_vector(arrays[fy], fy, path, len(x), fx))
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
    generator = torch.Generator().manual_seed(mix_seed(cfg.seed, 0x5B117))
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
        assert folder is not None  # kind == "cifar": found above
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
    arrays = read_arrays(path)
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
    x = feature_matrix(arrays["features"], "features", path)
    y = label_vector(arrays["labels"], "labels", path, len(x), "features")
    check_split(y, set_size, "evaluation", str(path))
    dataset = SetAnomalyDataset(x, y, set_size, num_sets, seed=mix_seed(seed, 3), fixed=True)
    items, targets = dataset.epoch_sets()
    return x[items], targets.clone()
