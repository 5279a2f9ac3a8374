"""The anomaly task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field, model_validator

from attnkit.data.config import GroupColumnConfig, SplitSourceConfig

__all__ = ["AnomalyDataConfig", "check_int"]


def check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class AnomalyDataConfig(SplitSourceConfig, GroupColumnConfig):
    """Where item features come from and how sets are built.

    ``source`` is ``"digits"`` (scikit-learn's bundled 8x8 handwritten digits: 64 features, 10 classes),
    a ``.npz``/``.pt`` file, or a CIFAR-100 folder (``cifar-100-python`` of the official python release).
    ``group_column`` (``.npz``/``.pt`` files): the array holding each item's group; no group is split
    between train/val/test.
    """

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field("digits", description="'digits', a .npz/.pt file of features or a CIFAR-100 folder"),
        "val_fraction": Field(0.1, gt=0.0, description="per-class share of training items for validation"),
        "test_fraction": Field(0.2, gt=0.0, description="per-class share held out (no test split given)"),
    }
    fractions_rule: ClassVar[str] = "< 1 to leave training items"

    set_size: int = Field(10, ge=2, description="items per set: set_size - 1 normal items and the anomaly")
    train_sets: int | None = Field(
        None, ge=1, description="sets per training epoch; default: training items // set_size"
    )
    val_sets: int = Field(1000, ge=1, description="fixed, seeded")
    test_sets: int = Field(2000, ge=1, description="fixed, seeded")
    standardize: bool = Field(True, description="z-score features with the training statistics")
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
        if self.feature_device is not None:
            try:
                torch.device(self.feature_device)
            except (RuntimeError, TypeError) as err:
                raise ValueError(
                    f"feature_device must be None or a torch device such as 'cpu' or 'cuda:0', "
                    f"got {self.feature_device!r}"
                ) from err
        return self
