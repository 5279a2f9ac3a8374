"""CIFAR-100 item features: official pickles (tiny fakes), frozen backbone, cache, split, errors."""

from __future__ import annotations

import pickle
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import load_item_features
from attnkit.data.anomaly.module import SetAnomalyDataModule
from attnkit.data.readers.cifar import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    module_fingerprint,
    preprocess_images,
    read_cifar100_split,
)

NAMES = ["apple", "bed", "camel", "dolphin", "forest", "girl"]
N_TRAIN, N_TEST = 20, 4  # per class


def _write_pickle(path: Path, obj: object) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _write_split(folder: Path, split: str, per_class: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(len(NAMES)), per_class)).tolist()
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    _write_pickle(
        folder / split,
        {
            b"filenames": [f"img_{i}.png".encode() for i in range(len(labels))],
            b"batch_label": f"{split} batch".encode(),
            b"fine_labels": labels,
            b"coarse_labels": [lab // 2 for lab in labels],
            b"data": data,
        },
    )


@pytest.fixture
def cifar(tmp_path: Path) -> Path:
    """A tiny fake ``cifar-100-python`` folder in the official pickle format (6 classes)."""
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    _write_split(folder, "train", N_TRAIN, seed=0)
    _write_split(folder, "test", N_TEST, seed=1)
    _write_pickle(
        folder / "meta",
        {b"fine_label_names": [n.encode() for n in NAMES], b"coarse_label_names": [b"a", b"b", b"c"]},
    )
    return folder


def _tiny_cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class _CallCounter:
    def __init__(self, module: nn.Module) -> None:
        self.calls = 0
        module.register_forward_hook(self)

    def __call__(self, module, args, output) -> None:
        self.calls += 1


def _cfg(folder: Path, **kw) -> AnomalyDataConfig:
    kw = {"set_size": 3, "image_size": 64, "val_sets": 20, "test_sets": 20, "standardize": False, **kw}
    return AnomalyDataConfig(source=str(folder), batch_size_features=32, **kw)


def _raw(folder: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    with open(folder / split, "rb") as f:
        obj = pickle.load(f, encoding="bytes")
    return torch.as_tensor(obj[b"data"]).view(-1, 3, 32, 32), torch.as_tensor(obj[b"fine_labels"])


def test_features_shapes_and_split(cifar: Path) -> None:
    f = load_item_features(_cfg(cifar), backbone=_tiny_cnn())
    assert f.feature_dim == 4 and f.num_classes == 6 and f.class_names == NAMES
    assert f.train_x.shape == (6 * 18, 4) and f.val_x.shape == (6 * 2, 4) and f.test_x.shape == (6 * N_TEST, 4)
    # 90/10 per class from the train pickle; test pickle untouched
    assert torch.bincount(f.train_y).tolist() == [18] * 6
    assert torch.bincount(f.val_y).tolist() == [2] * 6
    assert torch.bincount(f.test_y).tolist() == [N_TEST] * 6
    assert torch.equal(torch.sort(torch.cat([f.train_index, f.val_index])).values, torch.arange(6 * N_TRAIN))
    _, train_labels = _raw(cifar, "train")
    _, test_labels = _raw(cifar, "test")
    assert torch.equal(f.train_y, train_labels[f.train_index]) and torch.equal(f.val_y, train_labels[f.val_index])
    assert torch.equal(f.test_y, test_labels)


def test_features_are_backbone_of_normalised_resized_images(cifar: Path) -> None:
    net = _tiny_cnn()
    f = load_item_features(_cfg(cifar), backbone=net)
    train_images, _ = _raw(cifar, "train")
    test_images, _ = _raw(cifar, "test")
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

    def reference(img: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(img[None].float() / 255, size=(64, 64), mode="bilinear", align_corners=False)
        with torch.no_grad():
            return net((x - mean) / std)[0]

    for row in (0, 7):
        torch.testing.assert_close(f.train_x[row], reference(train_images[f.train_index[row]]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(f.val_x[3], reference(train_images[f.val_index[3]]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(f.test_x[5], reference(test_images[5]), atol=1e-5, rtol=1e-5)
    assert net.training  # mode restored


def test_preprocess_images() -> None:
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    x = preprocess_images(images, 32)  # no resize
    expected = (images.float() / 255 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(
        1, 3, 1, 1
    )
    torch.testing.assert_close(x, expected)
    assert preprocess_images(images, 48).shape == (2, 3, 48, 48)


def test_cache_written_and_reused(cifar: Path) -> None:
    net = _tiny_cnn()
    counter = _CallCounter(net)
    first = load_item_features(_cfg(cifar), backbone=net)
    assert counter.calls == 4 + 1  # 120 train images in batches of 32, 24 test images in one batch
    caches = list(cifar.glob("attnkit_features_*.pt"))
    assert len(caches) == 1 and caches[0].name.startswith("attnkit_features_custom_")
    assert [p.name for p in cifar.iterdir() if p.name.endswith(".tmp")] == []
    assert first.info["from_cache"] is False and first.info["feature_cache"] == str(caches[0])
    cached = torch.load(caches[0], weights_only=True)
    assert cached["num_train"] == 120 and cached["num_test"] == 24 and cached["image_size"] == 64

    counter.calls = 0
    second = load_item_features(_cfg(cifar), backbone=net)
    assert counter.calls == 0 and second.info["from_cache"] is True
    for split in ("train", "val", "test"):
        assert torch.equal(first.split(split)[0], second.split(split)[0])

    # a different image size does not match the cache: recomputed and overwritten
    third = load_item_features(_cfg(cifar, image_size=32), backbone=net)
    assert counter.calls > 0 and third.info["from_cache"] is False
    assert torch.load(caches[0], weights_only=True)["image_size"] == 32

    # other weights get their own default cache file
    load_item_features(_cfg(cifar), backbone=_tiny_cnn(seed=1))
    assert len(list(cifar.glob("attnkit_features_*.pt"))) == 2


def test_explicit_cache_path_and_parent_folder(cifar: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "feats.pt"
    net = _tiny_cnn()
    counter = _CallCounter(net)
    load_item_features(_cfg(cifar, feature_cache=str(cache)), backbone=net)
    assert cache.is_file() and counter.calls > 0
    counter.calls = 0
    f = load_item_features(_cfg(cifar.parent, feature_cache=str(cache)), backbone=net)  # folder containing it
    assert counter.calls == 0 and f.train_x.shape == (108, 4)


def test_corrupt_cache_is_recomputed(cifar: Path) -> None:
    cache = cifar / "c.pt"
    cache.write_bytes(b"garbage")
    net = _tiny_cnn()
    counter = _CallCounter(net)
    f = load_item_features(_cfg(cifar, feature_cache=str(cache)), backbone=net)
    assert counter.calls > 0 and f.train_x.shape == (108, 4)
    assert torch.load(cache, weights_only=True)["feature_dim"] == 4


def test_standardised_datamodule(cifar: Path) -> None:
    net = _tiny_cnn()
    counter = _CallCounter(net)
    dm = SetAnomalyDataModule(_cfg(cifar, standardize=True), batch_size=8, backbone=net)
    dm.prepare_data()
    dm.setup()
    assert counter.calls == 5  # features extracted once
    assert (dm.feature_dim, dm.set_size, dm.num_classes) == (4, 3, 6)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 4) and y.shape == (8,)
    art = dm.artifacts()
    assert len(art["mean"]) == 4 and art["class_names"] == NAMES
    assert art["info"]["backbone"].startswith("custom_")


def test_class_too_small_names_the_class(cifar: Path) -> None:
    with pytest.raises(ValueError, match=r"class 0 \('apple'\) has only 20 items but sets of set_size=25 need 24"):
        load_item_features(_cfg(cifar, set_size=25), backbone=_tiny_cnn())


# ---------------------------------------------------------------------------------------------- errors


def test_missing_torchvision_gives_install_hint(cifar: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # makes `import torchvision` fail
    with pytest.raises(ImportError, match=re.escape("pip install 'attnkit[vision]'")):
        load_item_features(_cfg(cifar, backbone_weights="/nonexistent.pth"))


class _FakeResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, stride=4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(5, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)).flatten(1))


@pytest.fixture
def fake_torchvision(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in ``torchvision`` whose ``models.get_model`` builds a tiny ResNet-like net."""
    built: list[str] = []

    def get_model(name: str, weights=None) -> nn.Module:
        assert weights is None
        built.append(name)
        return _FakeResNet()

    tv = types.ModuleType("torchvision")
    tv.models = types.SimpleNamespace(get_model=get_model)
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    return built


def test_missing_weights_file_is_explained(cifar: Path, fake_torchvision: list[str], tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"no backbone_weights given.*resnet34-b627a593\.pth.*backbone_weights=PATH"
    ):
        load_item_features(_cfg(cifar))
    missing = tmp_path / "resnet34.pth"
    with pytest.raises(FileNotFoundError, match=re.escape(f"backbone_weights file {missing} does not exist")):
        load_item_features(_cfg(cifar, backbone_weights=str(missing)))
    bad = tmp_path / "bad.pth"
    torch.save({"something": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match=re.escape(f"{bad}: could not load it as 'resnet34' weights")):
        load_item_features(_cfg(cifar, backbone_weights=str(bad)))


def test_torchvision_backbone_with_local_weights(cifar: Path, fake_torchvision: list[str], tmp_path: Path) -> None:
    torch.manual_seed(3)
    reference = _FakeResNet()
    weights = tmp_path / "resnet34.pth"
    torch.save(reference.state_dict(), weights)
    f = load_item_features(_cfg(cifar, backbone_weights=str(weights), feature_device="cpu"))
    assert fake_torchvision == ["resnet34"]
    assert f.feature_dim == 5  # the 1000-way fc layer is removed
    assert (cifar / "attnkit_features_resnet34.pt").is_file()
    train_images, _ = _raw(cifar, "train")
    with torch.no_grad():
        x = preprocess_images(train_images[f.train_index[:1]], 64)
        expected = reference.pool(reference.conv(x)).flatten(1)[0]
    torch.testing.assert_close(f.train_x[0], expected, atol=1e-5, rtol=1e-5)
    # the cache is reused without building the backbone again
    load_item_features(_cfg(cifar, backbone_weights=str(weights)))
    assert fake_torchvision == ["resnet34"]


def _rewrite(folder: Path, name: str, mutate) -> None:
    with open(folder / name, "rb") as fh:
        obj = pickle.load(fh, encoding="bytes")
    _write_pickle(folder / name, mutate(obj))


@pytest.mark.parametrize(
    ("name", "mutate", "pattern"),
    [
        ("train", lambda o: b"not a pickle", "not a readable CIFAR-100 python pickle"),
        ("train", lambda o: [1, 2, 3], "expected a dict, got list"),
        ("train", lambda o: {k: v for k, v in o.items() if k != b"fine_labels"}, "missing key 'fine_labels'"),
        ("test", lambda o: {**o, b"data": o[b"data"][:, :100]}, r"'data' must be a uint8 array \[N, 3072\]"),
        ("test", lambda o: {**o, b"data": o[b"data"].astype(np.float32)}, r"'data' must be a uint8 array"),
        ("test", lambda o: {**o, b"fine_labels": o[b"fine_labels"][:-1]}, "24 images but 23 'fine_labels'"),
        ("test", lambda o: {**o, b"fine_labels": [0.5] * 24}, "'fine_labels' must be a list of integers"),
        ("meta", lambda o: {b"coarse_label_names": []}, "missing key 'fine_label_names'"),
        ("train", lambda o: {**o, b"fine_labels": [7] * 120}, "label 7 but .*meta names only 6 classes"),
    ],
)
def test_malformed_pickles(cifar: Path, name: str, mutate, pattern: str) -> None:
    if name == "train" and pattern.startswith("not a readable"):
        (cifar / name).write_bytes(b"\x00garbage")
    else:
        _rewrite(cifar, name, mutate)
    with pytest.raises(ValueError, match=pattern) as err:
        load_item_features(_cfg(cifar), backbone=_tiny_cnn())
    assert str(cifar) in str(err.value)


def test_folder_without_cifar_files(tmp_path: Path) -> None:
    (tmp_path / "train").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"not a CIFAR-100 folder: missing file\(s\) \['test', 'meta'\]"):
        load_item_features(_cfg(tmp_path), backbone=_tiny_cnn())


def test_read_split_returns_images(cifar: Path) -> None:
    images, labels = read_cifar100_split(cifar, "test")
    assert images.shape == (24, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    raw = pickle.loads((cifar / "test").read_bytes(), encoding="bytes")[b"data"]
    assert torch.equal(images[3].flatten(), torch.as_tensor(raw[3]))  # channel-major 1024 R, G, B values


def test_backbone_with_batchnorm_and_fingerprint(cifar: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    fp = module_fingerprint(net)  # 0-dim buffers (num_batches_tracked) are hashed too
    assert fp == module_fingerprint(net)
    f = load_item_features(_cfg(cifar), backbone=net)
    assert f.feature_dim == 4 and (cifar / f"attnkit_features_custom_{fp}.pt").is_file()
    with torch.no_grad():
        net[1].running_mean += 1.0
    assert module_fingerprint(net) != fp
