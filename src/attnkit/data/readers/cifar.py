"""CIFAR-100 item features for the set anomaly task: official python pickles -> frozen CNN features.

Reads the ``cifar-100-python`` folder of the official release (files ``train``, ``test`` and
``meta``), resizes the 32x32 images to ``image_size``, normalises them with the ImageNet mean/std
and runs them through a frozen backbone whose classification layer is removed. Features are cached
on disk (written atomically) and reused when the cache matches (backbone name, image size, items).

torchvision is optional: it is imported only by :func:`build_torchvision_backbone`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.io import write_atomic

__all__ = [
    "CIFAR100_FILES",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "build_torchvision_backbone",
    "extract_features",
    "find_cifar100_folder",
    "load_cifar100_features",
    "module_fingerprint",
    "preprocess_images",
    "read_cifar100_meta",
    "read_cifar100_split",
]

log = logging.getLogger(__name__)

CIFAR100_FILES = ("train", "test", "meta")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CACHE_FORMAT = 1

# Where torchvision publishes the ImageNet weights of a few common backbones (for error messages only:
# nothing is ever downloaded by attnkit).
_KNOWN_WEIGHT_URLS = {
    "resnet18": "https://download.pytorch.org/models/resnet18-f37072fd.pth",
    "resnet34": "https://download.pytorch.org/models/resnet34-b627a593.pth",
    "resnet50": "https://download.pytorch.org/models/resnet50-0676ba61.pth",
}


def find_cifar100_folder(path: str | os.PathLike[str]) -> Path | None:
    """The folder holding ``train``, ``test`` and ``meta``: ``path`` itself or ``path/cifar-100-python``.

    Returns None when ``path`` is not a directory; raises FileNotFoundError naming the missing files
    when it is a directory without them.
    """
    path = Path(path)
    if not path.is_dir():
        return None
    for folder in (path, path / "cifar-100-python"):
        if all((folder / name).is_file() for name in CIFAR100_FILES):
            return folder
    missing = [name for name in CIFAR100_FILES if not (path / name).is_file()]
    raise FileNotFoundError(
        f"{path} is a directory but not a CIFAR-100 folder: missing file(s) {missing}. Expected the "
        "'cifar-100-python' folder of the official python release (files 'train', 'test', 'meta'), "
        "or a folder containing it."
    )


def _unpickle(file: Path) -> dict[Any, Any]:
    try:
        with open(file, "rb") as f:
            obj = pickle.load(f, encoding="bytes")  # the user's local dataset file
    except Exception as err:
        raise ValueError(f"{file}: not a readable CIFAR-100 python pickle ({type(err).__name__}: {err})") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: expected a dict, got {type(obj).__name__}")
    return obj


def _get(obj: dict[Any, Any], key: str, file: Path) -> Any:
    for k in (key.encode(), key):
        if k in obj:
            return obj[k]
    found = sorted(k.decode() if isinstance(k, bytes) else str(k) for k in obj)
    raise ValueError(f"{file}: malformed CIFAR-100 pickle: missing key {key!r}; found keys {found}")


def read_cifar100_split(folder: str | os.PathLike[str], split: str) -> tuple[Tensor, Tensor]:
    """Read ``folder/<split>`` (``"train"``/``"test"``): images uint8 ``[N, 3, 32, 32]``, fine labels int64 ``[N]``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    file = Path(folder) / split
    obj = _unpickle(file)
    data = _get(obj, "data", file)
    labels = _get(obj, "fine_labels", file)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        desc = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: 'data' must be a uint8 array [N, 3072], got {desc}")
    try:
        labels_np = np.asarray(labels)
    except Exception as err:
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: 'fine_labels' is not a list of integers") from err
    if labels_np.ndim != 1 or labels_np.dtype.kind not in "iu":
        raise ValueError(
            f"{file}: malformed CIFAR-100 pickle: 'fine_labels' must be a list of integers, "
            f"got dtype {labels_np.dtype} with shape {labels_np.shape}"
        )
    if len(labels_np) != len(data):
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: {len(data)} images but {len(labels_np)} 'fine_labels'")
    if len(data) == 0:
        raise ValueError(f"{file}: CIFAR-100 pickle contains no images")
    if labels_np.min() < 0:
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: negative label {int(labels_np.min())}")
    images = torch.from_numpy(np.ascontiguousarray(data)).view(-1, 3, 32, 32)
    return images, torch.from_numpy(labels_np.astype(np.int64))


def read_cifar100_meta(folder: str | os.PathLike[str]) -> list[str]:
    """The fine class names from ``folder/meta`` (index = fine label)."""
    file = Path(folder) / "meta"
    names = _get(_unpickle(file), "fine_label_names", file)
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, (bytes, str)) for n in names):
        raise ValueError(f"{file}: malformed CIFAR-100 pickle: 'fine_label_names' must be a list of strings")
    return [n.decode() if isinstance(n, bytes) else n for n in names]


def preprocess_images(images: Tensor, image_size: int) -> Tensor:
    """uint8 ``[B, 3, H, W]`` -> float32 ``[B, 3, S, S]`` (``S = image_size``): scale to [0, 1], resize, normalise.

    Resizing is bilinear (``align_corners=False``, no antialiasing).
    """
    x = images.float().div_(255.0)
    if x.shape[-2:] != (image_size, image_size):
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=False)
    mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def _module_device(module: nn.Module) -> torch.device:
    for t in module.parameters():
        return t.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")


def extract_features(
    backbone: nn.Module,
    images: Tensor,
    *,
    image_size: int,
    batch_size: int,
    device: torch.device | str | None = None,
    desc: str = "",
) -> Tensor:
    """Run a frozen ``backbone`` over uint8 ``images [N, 3, 32, 32]`` in batches -> float32 CPU ``[N, D]``.

    The backbone runs in eval mode under :func:`torch.inference_mode` on ``device`` (default: where
    its parameters are); its training mode is restored afterwards. Outputs ``[B, ...]`` are flattened.
    """
    device = _module_device(backbone) if device is None else torch.device(device)
    was_training = backbone.training
    backbone.eval()
    n = len(images)
    num_batches = math.ceil(n / batch_size)
    out: list[Tensor] = []
    try:
        with torch.inference_mode():
            for b, start in enumerate(range(0, n, batch_size)):
                x = preprocess_images(images[start : start + batch_size].to(device), image_size)
                y = backbone(x)
                if not isinstance(y, Tensor) or y.ndim < 1 or y.shape[0] != x.shape[0]:
                    shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
                    raise ValueError(
                        f"backbone must map [B, 3, H, W] images to [B, D] features; got {shape} for B={x.shape[0]}"
                    )
                out.append(y.reshape(y.shape[0], -1).float().cpu())
                if num_batches >= 10 and (b + 1) % max(1, num_batches // 10) == 0:
                    log.info("extracting %s features: batch %d/%d", desc, b + 1, num_batches)
    finally:
        backbone.train(was_training)
    return torch.cat(out)


def module_fingerprint(module: nn.Module) -> str:
    """A short hash of a module's class and state dict (names, shapes, dtypes and values)."""
    h = hashlib.sha256(type(module).__qualname__.encode())
    for name, t in module.state_dict().items():
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _remove_head(model: nn.Module, name: str) -> nn.Module:
    """Replace the final classification layer of a torchvision model by Identity."""
    if isinstance(getattr(model, "fc", None), nn.Linear):  # ResNet, ResNeXt, RegNet, GoogLeNet, Inception
        model.fc = nn.Identity()
        return model
    classifier = getattr(model, "classifier", None)
    if isinstance(classifier, nn.Linear):  # DenseNet
        model.classifier = nn.Identity()
        return model
    if isinstance(classifier, nn.Sequential) and isinstance(classifier[-1], nn.Linear):  # VGG, MobileNet, EfficientNet
        classifier[-1] = nn.Identity()
        return model
    heads = getattr(model, "heads", None)
    if isinstance(heads, nn.Module):  # ViT
        model.heads = nn.Identity()
        return model
    raise ValueError(
        f"don't know how to remove the classification layer of torchvision model {name!r}; "
        "pass a feature extractor module as backbone= instead"
    )


def _weights_hint(name: str) -> str:
    url = _KNOWN_WEIGHT_URLS.get(name)
    where = f" (published at {url})" if url else ""
    return (
        f"Download the torchvision {name} ImageNet weights{where} on a machine with internet access, e.g. "
        f"`python -c \"import torchvision; torchvision.models.get_model('{name}', weights='DEFAULT')\"` "
        "saves them under ~/.cache/torch/hub/checkpoints/, and pass backbone_weights=PATH to that file. "
        "attnkit never downloads anything."
    )


def build_torchvision_backbone(
    name: str, weights_path: str | os.PathLike[str] | None, *, device: torch.device | str = "cpu"
) -> nn.Module:
    """torchvision model ``name`` with ImageNet weights from the local file ``weights_path``, head removed, eval mode.

    Raises ImportError when torchvision is missing and FileNotFoundError when the weights file is.
    """
    try:
        import torchvision
    except ImportError as err:
        raise ImportError(
            f"extracting CIFAR-100 features with the {name!r} backbone needs torchvision: "
            "pip install 'attnkit[vision]' (or pass a feature extractor module as backbone=)"
        ) from err
    if weights_path is None:
        raise FileNotFoundError(f"no backbone_weights given for the {name!r} backbone. " + _weights_hint(name))
    weights_path = Path(weights_path)
    if not weights_path.is_file():
        raise FileNotFoundError(f"backbone_weights file {weights_path} does not exist. " + _weights_hint(name))
    try:
        model = torchvision.models.get_model(name, weights=None)
    except Exception as err:
        raise ValueError(f"torchvision has no model named {name!r} ({err})") from err
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as err:
        raise ValueError(
            f"{weights_path}: could not load it as {name!r} weights ({type(err).__name__}: {err}). "
            + _weights_hint(name)
        ) from err
    return _remove_head(model, name).eval().to(device)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _load_cache(path: Path, expected: dict[str, Any], train_y: Tensor, test_y: Tensor) -> dict[str, Any] | None:
    """The cached features if ``path`` exists and matches ``expected`` and the labels; None otherwise."""
    if not path.is_file():
        return None
    try:
        cache = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        log.warning("ignoring unreadable feature cache %s (%s); recomputing", path, err)
        return None
    if not isinstance(cache, dict):
        log.warning("ignoring malformed feature cache %s; recomputing", path)
        return None
    for key, value in expected.items():
        if cache.get(key) != value:
            log.warning(
                "feature cache %s does not match (%s: cached %r, expected %r); recomputing and overwriting it",
                path,
                key,
                cache.get(key),
                value,
            )
            return None
    try:
        ok = (
            cache["train_features"].shape == (len(train_y), cache["feature_dim"])
            and cache["test_features"].shape == (len(test_y), cache["feature_dim"])
            and torch.equal(cache["train_labels"], train_y)
            and torch.equal(cache["test_labels"], test_y)
        )
    except Exception:
        ok = False
    if not ok:
        log.warning("feature cache %s does not match the CIFAR-100 files; recomputing and overwriting it", path)
        return None
    return cache


def load_cifar100_features(
    source: str | os.PathLike[str],
    *,
    backbone: nn.Module | None = None,
    backbone_name: str = "resnet34",
    backbone_weights: str | os.PathLike[str] | None = None,
    image_size: int = 224,
    batch_size: int = 128,
    feature_cache: str | os.PathLike[str] | None = None,
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """Features of the CIFAR-100 train and test images, computed once and cached.

    Args:
        source: the ``cifar-100-python`` folder (or a folder containing it).
        backbone: a module mapping ``[B, 3, H, W] -> [B, D]``; None builds torchvision's ``backbone_name``
            with the weights in ``backbone_weights``.
        feature_cache: cache file; default ``<folder>/attnkit_features_<backbone>.pt`` where a passed module
            is named ``custom_<hash of its weights>``.
        device: where a torchvision backbone runs (default: cuda if available); a passed module runs where it is.

    Returns:
        dict with ``train_features [N, D]`` float32, ``train_labels [N]`` int64, ``test_features``,
        ``test_labels``, ``class_names`` (list[str]), ``backbone`` (name), ``cache_path`` (str) and
        ``from_cache`` (bool).
    """
    folder = find_cifar100_folder(source)
    if folder is None:
        raise FileNotFoundError(f"CIFAR-100 folder {source} does not exist")
    class_names = read_cifar100_meta(folder)
    train_images, train_y = read_cifar100_split(folder, "train")
    test_images, test_y = read_cifar100_split(folder, "test")
    for split, y in (("train", train_y), ("test", test_y)):
        if int(y.max()) >= len(class_names):
            raise ValueError(
                f"{folder / split}: label {int(y.max())} but {folder / 'meta'} names only {len(class_names)} classes"
            )

    name = backbone_name if backbone is None else f"custom_{module_fingerprint(backbone)}"
    default_cache = folder / f"attnkit_features_{_safe_name(name)}.pt"
    cache_path = Path(feature_cache) if feature_cache is not None else default_cache
    expected = {
        "format": CACHE_FORMAT,
        "backbone": name,
        "image_size": image_size,
        "num_train": len(train_y),
        "num_test": len(test_y),
    }
    cache = _load_cache(cache_path, expected, train_y, test_y)
    if cache is not None:
        log.info("loaded CIFAR-100 features from %s", cache_path)
        return {
            "train_features": cache["train_features"].float(),
            "train_labels": train_y,
            "test_features": cache["test_features"].float(),
            "test_labels": test_y,
            "class_names": class_names,
            "backbone": name,
            "cache_path": str(cache_path),
            "from_cache": True,
        }

    if backbone is None:
        device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        backbone = build_torchvision_backbone(backbone_name, backbone_weights, device=device)
    log.info("extracting CIFAR-100 features with %s at %dx%d", name, image_size, image_size)
    # runs where the backbone's parameters are
    common: dict[str, Any] = {"image_size": image_size, "batch_size": batch_size}
    train_x = extract_features(backbone, train_images, desc="train", **common)
    test_x = extract_features(backbone, test_images, desc="test", **common)
    if train_x.shape[1] != test_x.shape[1] or train_x.shape[1] == 0:
        raise ValueError(f"backbone produced features of sizes {train_x.shape[1]} (train) and {test_x.shape[1]} (test)")
    if not (torch.isfinite(train_x).all() and torch.isfinite(test_x).all()):
        raise ValueError(f"backbone {name} produced non-finite features")
    payload = {
        **expected,
        "feature_dim": int(train_x.shape[1]),
        "train_features": train_x,
        "train_labels": train_y,
        "test_features": test_x,
        "test_labels": test_y,
    }
    try:
        write_atomic(cache_path, lambda tmp: torch.save(payload, tmp))
        log.info("cached CIFAR-100 features in %s", cache_path)
    except OSError as err:
        log.warning("could not write the feature cache %s (%s); set feature_cache to a writable path", cache_path, err)
    return {
        "train_features": train_x,
        "train_labels": train_y,
        "test_features": test_x,
        "test_labels": test_y,
        "class_names": class_names,
        "backbone": name,
        "cache_path": str(cache_path),
        "from_cache": False,
    }
