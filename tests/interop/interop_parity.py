"""Randomising every tensor of a reference Hugging Face model, so that a parity test can fail.

A freshly initialised ``transformers`` model has every bias at 0 and every norm weight at 1 (Qwen2's
q/k/v biases included): an importer that dropped a bias, or read one norm's weight for another's,
would still compute the same outputs. :func:`perturb` adds seeded noise to every parameter and every
floating-point buffer saved with the model, before it is saved and imported. Used by the tests in
``tests/interop`` and by ``benchmarks/hf_parity.py`` (which puts this folder on ``sys.path``).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["constant_tensors", "perturb"]


@torch.no_grad()
def perturb(model: nn.Module, seed: int, scale: float = 0.3) -> list[str]:
    """Add Gaussian noise to every parameter and saved floating-point buffer of ``model``, in place.

    A tensor whose entries are all equal (a bias of 0, a norm weight of 1) gets noise of standard
    deviation ``scale``; any other, ``scale`` times its own standard deviation (so that a large model
    keeps the scale of its initialisation). Tied tensors are perturbed once and stay tied. Returns the
    names of the tensors changed; raises if one is still constant afterwards (a single number)."""
    generator = torch.Generator().manual_seed(seed)
    saved = set(model.state_dict())
    tensors = dict(model.named_parameters())
    tensors |= {name: b for name, b in model.named_buffers() if name in saved and b.is_floating_point()}
    for tensor in tensors.values():
        spread = tensor.float().std().item() if tensor.numel() > 1 else 0.0
        std = scale * spread if spread > 0 else scale
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * std
        tensor.add_(noise.to(tensor.dtype))
    still = constant_tensors({name: t.detach() for name, t in tensors.items()})
    if still:
        raise ValueError(f"perturb left constant tensors: {still}")
    return sorted(tensors)


def constant_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors of ``tensors`` whose entries are all equal (a bias of
    0 or a norm weight of 1 that was never randomised), sorted."""
    return sorted(
        name
        for name, t in tensors.items()
        if t.is_floating_point() and (t.numel() < 2 or bool((t == t.flatten()[0]).all()))
    )
