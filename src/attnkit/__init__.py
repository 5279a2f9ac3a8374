"""attnkit: build, train, inspect and tune Transformer models with PyTorch and Lightning."""

from __future__ import annotations

from typing import Any

from attnkit.version import __version__

__all__ = ["__version__", "evaluate", "load_run", "predict_file", "train", "tune"]


def __getattr__(name: str) -> Any:
    # Lazy: `import attnkit.nn` must not pull in Lightning.
    if name in ("train", "load_run", "evaluate", "predict_file"):
        from attnkit import api

        return getattr(api, name)
    if name == "tune":
        from attnkit.tuning import tune

        return tune
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
