"""Set anomaly data: digits and user-file item features, set construction, the Lightning data module."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import load_item_features, per_class_split
from attnkit.data.anomaly.module import SetAnomalyDataModule
from attnkit.data.anomaly.sets import EpochShuffleSampler, SetAnomalyDataset, build_anomaly_sets


@pytest.fixture(scope="module")
def digits_raw():
    return load_item_features(AnomalyDataConfig(standardize=False))


@pytest.fixture(scope="module")
def digits_std():
    return load_item_features(AnomalyDataConfig())


def _check_sets(items: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor) -> None:
    """Every set: set_size - 1 distinct items of one class, one item of another class at target."""
    set_labels = labels[items]  # [S, set_size]
    s, n = items.shape
    rows = torch.arange(s)
    anomaly = set_labels[rows, targets]
    normal_mask = torch.ones_like(items, dtype=torch.bool)
    normal_mask[rows, targets] = False
    normal = set_labels[normal_mask].view(s, n - 1)
    assert (normal == normal[:, :1]).all(), "normal items must share one class"
    assert (anomaly != normal[:, 0]).all(), "the item at target must be of another class"
    sorted_items = torch.sort(items, dim=1).values
    assert (sorted_items[:, 1:] != sorted_items[:, :-1]).all(), "items of a set must be distinct"


# ---------------------------------------------------------------------------------------------- digits


def test_digits_default_shapes_and_stratified_splits(digits_raw, digits_std) -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    f = digits_raw
    assert f.feature_dim == 64 and f.num_classes == 10
    assert f.class_names == [str(i) for i in range(10)]
    n_train, n_val, n_test = len(f.train_y), len(f.val_y), len(f.test_y)
    assert n_train + n_val + n_test == len(digits.target) == 1797
    for split in ("train", "val", "test"):
        x, y = f.split(split)
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.shape == (len(y), 64)
        idx = getattr(f, f"{split}_index")
        assert torch.equal(x, torch.as_tensor(digits.data[idx.numpy()], dtype=torch.float32))
        assert torch.equal(y, torch.as_tensor(digits.target[idx.numpy()]))
    # disjoint and complete
    all_idx = torch.cat([f.train_index, f.val_index, f.test_index])
    assert torch.equal(torch.sort(all_idx).values, torch.arange(1797))
    # stratified: per class round(n * 0.2) test items, then round(rest * 0.1) validation items
    for c in range(10):
        n = int((torch.as_tensor(digits.target) == c).sum())
        n_test_c = int((f.test_y == c).sum())
        n_val_c = int((f.val_y == c).sum())
        assert n_test_c == int(np.floor(n * 0.2 + 0.5))
        assert n_val_c == int(np.floor((n - n_test_c) * 0.1 + 0.5))
    assert 0.19 < n_test / 1797 < 0.21 and 0.07 < n_val / 1797 < 0.09


def test_digits_standardised_with_train_statistics(digits_raw, digits_std) -> None:
    raw, f = digits_raw, digits_std
    assert torch.equal(raw.train_index, f.train_index)  # same seeded split
    mean = raw.train_x.mean(0)
    std = raw.train_x.std(0, unbiased=False)
    std = torch.where(std < 1e-6, torch.ones_like(std), std)
    torch.testing.assert_close(f.mean, mean)
    torch.testing.assert_close(f.std, std)
    for split in ("train", "val", "test"):
        torch.testing.assert_close(f.split(split)[0], (raw.split(split)[0] - mean) / std)
    varying = raw.train_x.std(0) > 0
    torch.testing.assert_close(f.train_x.mean(0), torch.zeros(64), atol=1e-5, rtol=0)
    torch.testing.assert_close(f.train_x.std(0, unbiased=False)[varying], torch.ones(int(varying.sum())))
    assert not torch.allclose(f.val_x.mean(0), torch.zeros(64), atol=1e-5)  # not re-centred on its own


def test_split_depends_on_seed() -> None:
    a = load_item_features(AnomalyDataConfig(seed=1, standardize=False))
    b = load_item_features(AnomalyDataConfig(seed=1, standardize=False))
    c = load_item_features(AnomalyDataConfig(seed=2, standardize=False))
    assert torch.equal(a.test_index, b.test_index) and torch.equal(a.val_index, b.val_index)
    assert not torch.equal(a.test_index, c.test_index)


def test_stratified_split_keeps_one_item_per_class() -> None:
    labels = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2])
    kept, held = per_class_split(labels, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(torch.sort(torch.cat([kept, held])).values, torch.arange(13))
    assert (labels[held] == 0).sum() == 1 and (labels[held] == 1).sum() == 5 and (labels[held] == 2).sum() == 0


# ---------------------------------------------------------------------------------------------- sets


def test_fixed_sets_have_exactly_one_anomaly_at_target(digits_std) -> None:
    f = digits_std
    ds = SetAnomalyDataset(f.train_x, f.train_y, 10, 2000, seed=0, fixed=True)
    assert len(ds) == 2000
    _check_sets(ds.items, ds.targets, f.train_y)
    for i in (0, 1, 1999, -1):
        x, t = ds[i]
        assert x.shape == (10, 64) and x.dtype == torch.float32
        assert t.dtype == torch.int64 and t.ndim == 0
        assert torch.equal(x, f.train_x[ds.items[i]])
        labels = f.train_y[ds.items[i]]
        assert (labels != labels[t]).sum() == 9
    with pytest.raises(IndexError):
        ds[2000]


def test_anomaly_position_is_uniform(digits_std) -> None:
    f = digits_std
    ds = SetAnomalyDataset(f.train_x, f.train_y, 10, 2000, seed=3, fixed=True)
    counts = torch.bincount(ds.targets, minlength=10).float()
    assert (counts > 0).all()
    assert counts.max() <= 2 * counts.mean()
    chi2 = float(((counts - 200) ** 2 / 200).sum())
    assert chi2 < 30.0  # 9 degrees of freedom: p < 0.0005 above ~29.7
    # normal class and anomaly class are spread over all classes too
    maj = f.train_y[ds.items[torch.arange(2000), (ds.targets + 1) % 10]]
    assert torch.bincount(maj, minlength=10).min() > 100


def test_random_sets_are_valid_and_uniform(digits_std) -> None:
    f = digits_std
    ds = SetAnomalyDataset(f.train_x, f.train_y, 5, 600, seed=0, fixed=False)
    pairs = [ds.set_items(i) for i in range(600)]
    items = torch.stack([p[0] for p in pairs])
    targets = torch.stack([p[1] for p in pairs])
    _check_sets(items, targets, f.train_y)
    counts = torch.bincount(targets, minlength=5)
    assert (counts > 0).all() and counts.max() <= 2 * counts.float().mean()


def test_fixed_sets_identical_for_same_seed(digits_std) -> None:
    f = digits_std
    a = SetAnomalyDataset(f.val_x, f.val_y, 10, 300, seed=7, fixed=True)
    b = SetAnomalyDataset(f.val_x, f.val_y, 10, 300, seed=7, fixed=True)
    c = SetAnomalyDataset(f.val_x, f.val_y, 10, 300, seed=8, fixed=True)
    assert torch.equal(a.items, b.items) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.items, c.items)
    a.set_epoch(5)  # no effect on fixed sets
    x0, t0 = a[0]
    x1, t1 = b[0]
    assert torch.equal(x0, x1) and t0 == t1


def test_train_sets_reproducible_per_epoch_and_local_rng(digits_std) -> None:
    f = digits_std
    a = SetAnomalyDataset(f.train_x, f.train_y, 10, 50, seed=11, fixed=False)
    b = SetAnomalyDataset(f.train_x, f.train_y, 10, 50, seed=11, fixed=False)
    state = torch.get_rng_state()
    a.set_epoch(3)
    b.set_epoch(3)
    sets_a = [a.set_items(i) for i in range(50)]
    sets_b = [b.set_items(i) for i in range(50)]
    assert torch.equal(torch.get_rng_state(), state), "the global RNG must not be used"
    assert all(torch.equal(p[0], q[0]) and p[1] == q[1] for p, q in zip(sets_a, sets_b))
    # repeated access in the same epoch gives the same set; (epoch, index) overrides the epoch
    assert torch.equal(a[4][0], a[4][0])
    b.set_epoch(0)
    assert torch.equal(b[(3, 4)][0], a[4][0])
    # another epoch or another seed gives other sets
    a.set_epoch(4)
    items_3 = torch.stack([p[0] for p in sets_a])
    items_4 = torch.stack([a.set_items(i)[0] for i in range(50)])
    assert (items_3 != items_4).any(dim=1).float().mean() > 0.9
    c = SetAnomalyDataset(f.train_x, f.train_y, 10, 50, seed=12, fixed=False)
    c.set_epoch(3)
    items_c = torch.stack([c.set_items(i)[0] for i in range(50)])
    assert (items_3 != items_c).any(dim=1).float().mean() > 0.9


def test_small_classes_are_only_anomalies() -> None:
    labels = torch.tensor([0] * 6 + [1] * 6 + [2] * 2)  # class 2 is too small to be the normal class
    items, targets = build_anomaly_sets(labels, 5, 3000, torch.Generator().manual_seed(0))
    _check_sets(items, targets, labels)
    normal = labels[items[torch.arange(3000), (targets + 1) % 5]]
    anomaly = labels[items[torch.arange(3000), targets]]
    assert set(normal.tolist()) == {0, 1}
    assert set(anomaly.tolist()) == {0, 1, 2}
    # the anomaly's class is uniform over the other classes: class 2 in about half of the sets
    assert 0.4 < (anomaly == 2).float().mean() < 0.6


def test_chunked_construction_matches_rules() -> None:
    labels = torch.randint(0, 4, (400,), generator=torch.Generator().manual_seed(1))
    items, targets = build_anomaly_sets(labels, 8, 257, torch.Generator().manual_seed(0), max_elements=300)
    assert items.shape == (257, 8) and targets.shape == (257,)
    _check_sets(items, targets, labels)


def test_dataset_rejects_unbuildable_data() -> None:
    x = torch.randn(6, 3)
    with pytest.raises(ValueError, match="need >= 2 classes"):
        SetAnomalyDataset(x, torch.zeros(6, dtype=torch.long), 3, 5, seed=0, fixed=True)
    with pytest.raises(ValueError, match="one with >= 4 items"):
        SetAnomalyDataset(x, torch.tensor([0, 0, 0, 1, 1, 1]), 5, 5, seed=0, fixed=False)
    with pytest.raises(ValueError, match="set_size must be an integer >= 2"):
        SetAnomalyDataset(x, torch.tensor([0, 0, 0, 1, 1, 1]), 1, 5, seed=0, fixed=True)


def test_sampler_yields_epoch_and_shuffles_reproducibly(digits_std) -> None:
    f = digits_std
    ds = SetAnomalyDataset(f.train_x, f.train_y, 4, 21, seed=0, fixed=False)
    s = EpochShuffleSampler(ds, seed=0)
    s.set_epoch(2)
    assert ds.epoch == 2
    a = list(s)
    assert {e for e, _ in a} == {2} and sorted(i for _, i in a) == list(range(21))
    assert a == list(s) and len(s) == 21
    s.set_epoch(3)
    assert [i for _, i in a] != [i for _, i in s]
    # sharded across 2 ranks: disjoint, equal halves of the same order (its last set left out)
    ranks = [EpochShuffleSampler(ds, seed=0, num_replicas=2, rank=r) for r in (0, 1)]
    for r in ranks:
        r.set_epoch(2)
    parts = [[i for _, i in r] for r in ranks]
    assert len(parts[0]) == len(parts[1]) == len(ranks[0]) == 10
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(i for _, i in a[:20])


# ---------------------------------------------------------------------------------------------- files


def _features(n_per_class: int = 15, classes=(3, 7, 11), dim: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.asarray(classes), n_per_class)
    feats = rng.normal(size=(len(labels), dim)) + labels[:, None]
    return feats.astype(np.float64), labels.astype(np.int32)


def _cfg(path: Path, **kw) -> AnomalyDataConfig:
    kw.setdefault("set_size", 3)
    kw.setdefault("standardize", False)
    return AnomalyDataConfig(source=str(path), **kw)


@pytest.mark.parametrize("fmt", ["npz", "pt"])
def test_file_features_labels(tmp_path: Path, fmt: str) -> None:
    feats, labels = _features(n_per_class=20)
    path = tmp_path / f"items.{fmt}"
    if fmt == "npz":
        np.savez(path, features=feats, labels=labels)
    else:
        torch.save({"features": torch.as_tensor(feats), "labels": torch.as_tensor(labels)}, path)
    f = load_item_features(_cfg(path))
    assert f.num_classes == 3 and f.feature_dim == 5 and f.info["labels"] == [3, 7, 11]
    assert len(f.test_y) == 12 and len(f.val_y) == 6 and len(f.train_y) == 42  # 20 -> 4 test, 2 val, 14 train
    all_idx = torch.cat([f.train_index, f.val_index, f.test_index])
    assert torch.equal(torch.sort(all_idx).values, torch.arange(60))
    for split in ("train", "val", "test"):
        x, y = f.split(split)
        idx = getattr(f, f"{split}_index").numpy()
        torch.testing.assert_close(x, torch.as_tensor(feats[idx], dtype=torch.float32))
        assert torch.equal(y, torch.as_tensor(np.searchsorted([3, 7, 11], labels[idx]), dtype=torch.int64))
        assert torch.bincount(y, minlength=3).tolist() == [len(y) // 3] * 3


@pytest.mark.parametrize("fmt", ["npz", "pt"])
@pytest.mark.parametrize("with_val", [True, False])
def test_file_fixed_splits(tmp_path: Path, fmt: str, with_val: bool) -> None:
    tr_x, tr_y = _features(20, seed=1)
    va_x, va_y = _features(4, seed=2)
    te_x, te_y = _features(5, seed=3)
    arrays = {"train_features": tr_x, "train_labels": tr_y, "test_features": te_x, "test_labels": te_y}
    if with_val:
        arrays |= {"val_features": va_x, "val_labels": va_y}
    path = tmp_path / f"split.{fmt}"
    if fmt == "npz":
        np.savez(path, **arrays)
    else:
        torch.save({k: torch.as_tensor(v) for k, v in arrays.items()}, path)
    f = load_item_features(_cfg(path))
    torch.testing.assert_close(f.test_x, torch.as_tensor(te_x, dtype=torch.float32))
    assert f.test_index is None
    if with_val:
        torch.testing.assert_close(f.val_x, torch.as_tensor(va_x, dtype=torch.float32))
        torch.testing.assert_close(f.train_x, torch.as_tensor(tr_x, dtype=torch.float32))
        assert f.info["given_splits"] == ["train", "val", "test"]
    else:  # 10 % of each training class held out for validation
        assert torch.bincount(f.val_y).tolist() == [2, 2, 2] and len(f.train_y) == 54
        assert torch.equal(torch.sort(torch.cat([f.train_index, f.val_index])).values, torch.arange(60))
        torch.testing.assert_close(f.val_x, torch.as_tensor(tr_x[f.val_index.numpy()], dtype=torch.float32))


def test_file_standardised_and_datamodule(tmp_path: Path) -> None:
    feats, labels = _features(n_per_class=30, dim=6)
    path = tmp_path / "items.npz"
    np.savez(path, features=feats * 100 + 5, labels=labels)
    dm = SetAnomalyDataModule(_cfg(path, standardize=True, val_sets=40, test_sets=50), batch_size=16)
    dm.setup()
    assert dm.feature_dim == 6 and dm.set_size == 3 and dm.num_classes == 3
    torch.testing.assert_close(dm.features.train_x.mean(0), torch.zeros(6), atol=1e-5, rtol=0)
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (16, 3, 6) and y.shape == (16,)


def _write(path: Path, **arrays) -> Path:
    if path.suffix == ".npz":
        np.savez(path, **arrays)
    else:
        torch.save({k: torch.as_tensor(v) for k, v in arrays.items()}, path)
    return path


_F, _Y = _features(n_per_class=10)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
@pytest.mark.parametrize(
    ("arrays", "pattern"),
    [
        (
            {"feats": _F, "labels": _Y},
            r"missing key\(s\) \['features'\] \(found keys \['feats', 'labels'\]\); expected",
        ),
        ({"train_features": _F}, r"missing key\(s\) \['train_labels'\]"),
        ({"test_features": _F, "test_labels": _Y}, r"missing keys \['train_features', 'train_labels'\]"),
        ({"features": _F, "labels": _Y, "train_features": _F}, "has both"),
        ({"features": _F[:, 0], "labels": _Y}, r"'features' must be 2-D \[N, D\]"),
        ({"features": _F, "labels": _Y[:, None]}, r"'labels' must be 1-D \[N\]"),
        ({"features": _F, "labels": _Y[:-1]}, "has 29 labels but 'features' has 30 items"),
        ({"features": _F, "labels": _Y.astype(np.float32)}, "must hold integer class labels"),
        ({"features": np.where(np.eye(30, 5) > 0, np.nan, _F), "labels": _Y}, "non-finite values.*first in row 0"),
        ({"features": _F[:0], "labels": _Y[:0]}, "is empty"),
        ({"features": _F, "labels": np.zeros(30, np.int64)}, "at least 2 classes"),
        ({"features": _F[:23], "labels": _Y[:23]}, r"class 11 has only 3 items but sets of set_size=6 need 5"),
        (
            {"train_features": _F, "train_labels": _Y, "test_features": _F[:, :2], "test_labels": _Y},
            "different feature sizes",
        ),
    ],
)
def test_file_errors(tmp_path: Path, suffix: str, arrays: dict, pattern: str) -> None:
    path = _write(tmp_path / f"bad{suffix}", **arrays)
    with pytest.raises(ValueError, match=pattern) as err:
        load_item_features(_cfg(path, set_size=6))
    assert str(path) in str(err.value)


def test_file_errors_empty_and_unreadable(tmp_path: Path) -> None:
    empty_npz = tmp_path / "empty.npz"
    np.savez(empty_npz)
    with pytest.raises(ValueError, match=re.escape(f"{empty_npz}: the file is empty")):
        load_item_features(_cfg(empty_npz))
    empty_pt = tmp_path / "empty.pt"
    torch.save({}, empty_pt)
    with pytest.raises(ValueError, match=re.escape(f"{empty_pt}: the file is empty")):
        load_item_features(_cfg(empty_pt))
    for name in ("zero.npz", "zero.pt"):
        (tmp_path / name).write_bytes(b"")
        with pytest.raises(ValueError, match=re.escape(f"{tmp_path / name}: not a readable")):
            load_item_features(_cfg(tmp_path / name))
    not_dict = tmp_path / "list.pt"
    torch.save([torch.zeros(3)], not_dict)
    with pytest.raises(ValueError, match="expected a dict of tensors"):
        load_item_features(_cfg(not_dict))
    with pytest.raises(FileNotFoundError, match=r"missing\.npz does not exist"):
        load_item_features(_cfg(tmp_path / "missing.npz"))
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_item_features(_cfg(tmp_path / "nothing"))
    (tmp_path / "items.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_item_features(_cfg(tmp_path / "items.csv"))


def test_small_validation_split_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "items.npz", features=_F, labels=_Y)  # 10 per class: 2 test, 1 val, 7 train
    with pytest.raises(ValueError, match=r"no class of the val split has the 2 items.*larger val_fraction"):
        load_item_features(_cfg(path))


def test_backbone_only_for_cifar() -> None:
    with pytest.raises(ValueError, match="only used with a CIFAR-100 folder"):
        load_item_features(AnomalyDataConfig(), backbone=nn.Identity())


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"source": " "}, "source must be 'digits'"),
        ({"set_size": 1}, r"set_size\n  Input should be greater than or equal to 2"),
        ({"set_size": 3.5}, r"set_size\n  Input should be a valid integer"),
        ({"set_size": "three"}, r"set_size\n  Input should be a valid integer"),
        ({"train_sets": 0}, r"train_sets\n  Input should be greater than or equal to 1"),
        ({"val_sets": 0}, r"val_sets\n  Input should be greater than or equal to 1"),
        ({"test_sets": -5}, r"test_sets\n  Input should be greater than or equal to 1"),
        ({"val_fraction": 0.0}, r"val_fraction\n  Input should be greater than 0"),
        ({"test_fraction": 1.5}, r"test_fraction\n  Input should be less than 1"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, r"val_fraction \+ test_fraction must be < 1"),
        ({"seed": "one"}, r"seed\n  Input should be a valid integer"),
        ({"standardize": "maybe"}, r"standardize\n  Input should be a valid boolean"),
        ({"feature_cache": ""}, r"feature_cache\n  String should have at least 1 character"),
        ({"backbone": "resnet 34"}, r"backbone\n  String should match pattern"),
        ({"backbone_weights": 3}, r"backbone_weights\n  Input should be a valid string"),
        ({"image_size": 4}, r"image_size\n  Input should be greater than or equal to 8"),
        ({"batch_size_features": 0}, r"batch_size_features\n  Input should be greater than or equal to 1"),
        ({"feature_device": "gpu0"}, "feature_device must be None or a torch device"),
    ],
)
def test_config_validation(kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        AnomalyDataConfig(**kwargs)


def test_config_accepts_pathlike(tmp_path: Path) -> None:
    assert AnomalyDataConfig(source=tmp_path / "x.npz").source == str(tmp_path / "x.npz")


# ---------------------------------------------------------------------------------------------- data module


def test_datamodule_digits() -> None:
    cfg = AnomalyDataConfig(val_sets=100, test_sets=120)
    dm = SetAnomalyDataModule(cfg, batch_size=32)
    with pytest.raises(RuntimeError, match="setup"):
        _ = dm.feature_dim
    dm.setup("fit")
    features = dm.features
    dm.setup("test")  # loads only once
    assert dm.features is features
    assert (dm.feature_dim, dm.set_size, dm.num_classes) == (64, 10, 10)
    assert len(dm.train_dataset) == len(features.train_y) // 10
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 10, 64) and x.dtype == torch.float32 and y.shape == (32,) and y.dtype == torch.int64
    assert len(dm.val_dataset) == 100 and len(dm.test_dataset) == 120
    val_1 = [b for b in dm.val_dataloader()]
    val_2 = [b for b in dm.val_dataloader()]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(val_1, val_2))
    assert torch.equal(torch.cat([b[1] for b in val_1]), dm.val_dataset.targets)  # not shuffled
    # a second module with the same config gives the same val/test sets
    dm2 = SetAnomalyDataModule(cfg, batch_size=32)
    dm2.setup()
    assert torch.equal(dm2.test_dataset.items, dm.test_dataset.items)

    art = dm.artifacts()
    art2 = json.loads(json.dumps(art))
    assert art2["source"] == "digits" and art2["feature_dim"] == 64 and art2["set_size"] == 10
    assert art2["num_classes"] == 10 and len(art2["mean"]) == 64 and len(art2["std"]) == 64
    assert art2["config"]["seed"] == 42


def test_datamodule_train_loader_follows_trainer_epoch() -> None:
    dm = SetAnomalyDataModule(AnomalyDataConfig(train_sets=40, val_sets=10, test_sets=10), batch_size=8)
    dm.setup()

    def epoch_batches() -> list[torch.Tensor]:
        return [x for x, _ in dm.train_dataloader()]

    e0 = epoch_batches()
    assert dm.train_dataset.epoch == 0
    assert all(torch.equal(a, b) for a, b in zip(e0, epoch_batches()))
    dm.trainer = SimpleNamespace(current_epoch=2, world_size=1, global_rank=0)
    e2 = epoch_batches()
    assert dm.train_dataset.epoch == 2
    assert not torch.equal(torch.cat(e0), torch.cat(e2))
    assert all(torch.equal(a, b) for a, b in zip(e2, epoch_batches()))
    # a worker process sees the same sets
    loader = dm.train_dataloader()
    workers = DataLoader(dm.train_dataset, batch_size=8, sampler=loader.sampler, num_workers=1)
    assert all(torch.equal(a, b) for a, (b, _) in zip(e2, workers))


class _Recorder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 1)
        self.seen: dict[int, list[torch.Tensor]] = {}

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.setdefault(self.current_epoch, []).append(x.clone())
        return nn.functional.cross_entropy(self.lin(x).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`", "ignore:.*LeafSpec")
def test_lightning_redraws_train_sets_each_epoch() -> None:
    def fit() -> dict[int, list[torch.Tensor]]:
        dm = SetAnomalyDataModule(AnomalyDataConfig(train_sets=24, val_sets=8, test_sets=8), batch_size=8)
        model = _Recorder()
        trainer = L.Trainer(
            max_epochs=2,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        )
        trainer.fit(model, datamodule=dm)
        return model.seen

    a, b = fit(), fit()
    assert sorted(a) == [0, 1] and len(a[0]) == 3
    assert not torch.equal(torch.cat(a[0]), torch.cat(a[1]))
    for epoch in (0, 1):
        assert torch.equal(torch.cat(a[epoch]), torch.cat(b[epoch]))


def test_anomaly_training_loader_resumes_mid_epoch_with_the_sets_it_would_have_seen() -> None:
    """The anomaly task's training loader is stateful like the other tasks': restored from the state after 2
    batches of epoch 1 (into a fresh module whose sampler starts at epoch 0, as a resumed run's does), it gives
    the rest of epoch 1's sets, the same sets as the uninterrupted loader."""
    cfg = AnomalyDataConfig(train_sets=40, val_sets=8, test_sets=8)
    first = SetAnomalyDataModule(cfg, batch_size=8)
    first.setup()
    loader = first.train_dataloader()
    loader.sampler.set_epoch(1)
    it = iter(loader)
    seen = [next(it) for _ in range(2)]
    state = loader.state_dict()
    rest = list(it)
    resumed = SetAnomalyDataModule(cfg, batch_size=8)
    resumed.setup()
    again = resumed.train_dataloader()
    again.load_state_dict(state)
    got = list(again)
    assert len(got) == len(rest) == 3 and len(seen) == 2
    for (x, y), (x2, y2) in zip(rest, got):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    assert isinstance(resumed.val_dataloader(), StatefulDataLoader)
