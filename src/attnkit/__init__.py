"""attnkit: build, train, inspect and tune Transformer models with PyTorch and Lightning."""

__version__ = "0.1.0"
