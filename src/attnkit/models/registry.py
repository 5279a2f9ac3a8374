"""The model registry: ``@register_model("name", ConfigClass)`` on a model class registers it in :data:`MODELS`.

``MODELS[name]`` is ``(config class, model class)``; :func:`build_model` builds one from its name and
config (a dict or the config object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

from attnkit.config import StrictModel
from attnkit.nn import Registry

__all__ = ["MODELS", "build_model", "register_model"]

ModelEntry = tuple[type[StrictModel], Callable[[Any], nn.Module]]
MODELS: Registry[ModelEntry] = Registry("model")
"""The models by name: ``(config class, model class)``."""

M = TypeVar("M", bound=type[nn.Module])


def register_model(name: str, config: type[StrictModel]) -> Callable[[M], M]:
    """Class decorator: register the model class under ``name``, configured by ``config``."""

    def decorate(model_cls: M) -> M:
        MODELS.add(name, (config, model_cls))
        return model_cls

    return decorate


def build_model(name: str, config: dict[str, Any] | StrictModel) -> nn.Module:
    """Build a registered model from its name and config (a dict or the config object)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    config_cls, model_cls = MODELS[name]
    cfg = config if isinstance(config, config_cls) else config_cls.model_validate(config)
    return model_cls(cfg)
