"""Normalisation layers: LayerNorm (torch's), RMSNorm (LLaMA's) and OffsetRMSNorm (Gemma's), registered by
name in :data:`NORMS`.

A new norm is one ``@NORMS.register("name")`` function ``(dim, *, eps, bias) -> nn.Module``.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from attnkit.registry import Registry

__all__ = ["NORMS", "Norm", "NormFactory", "OffsetRMSNorm", "RMSNorm", "make_norm"]

Norm = str
"""A norm's registered name (one of :data:`NORMS`)."""


class NormFactory(Protocol):
    def __call__(self, dim: int, *, eps: float, bias: bool) -> nn.Module: ...


NORMS: Registry[NormFactory] = Registry("norm")
"""The norms by name: ``"layernorm"``, ``"rmsnorm"``, ``"rmsnorm_offset"``."""


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang & Sennrich 2019), as LLaMA's ``LlamaRMSNorm``.

    ``weight * x / sqrt(mean(x^2) + eps)`` over the last dimension, computed in float32 and cast back
    to the input's dtype before the weight is applied (so half-precision inputs do not overflow).
    No bias and no mean subtraction. Parameter: ``weight [dim]`` (initialised to ones).
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        if dim <= 0 or not eps > 0:
            raise ValueError(f"RMSNorm needs dim > 0 and eps > 0, got dim={dim}, eps={eps}")
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class OffsetRMSNorm(nn.Module):
    """RMSNorm scaled by ``1 + weight``, all in float32 and cast back once, as Gemma's ``GemmaRMSNorm``:
    ``(x / sqrt(mean(x^2) + eps)) * (1 + weight)``. Parameter: ``weight [dim]`` (initialised to zeros:
    the identity scale). Not an :class:`RMSNorm` (code that reads an RMSNorm's ``weight`` as its scale
    must not take this one for it)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        if dim <= 0 or not eps > 0:
            raise ValueError(f"OffsetRMSNorm needs dim > 0 and eps > 0, got dim={dim}, eps={eps}")
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


@NORMS.register("layernorm")
def _layernorm(dim: int, *, eps: float, bias: bool) -> nn.Module:
    return nn.LayerNorm(dim, eps=eps, bias=bias)


@NORMS.register("rmsnorm")
def _rmsnorm(dim: int, *, eps: float, bias: bool) -> nn.Module:
    return RMSNorm(dim, eps=eps)  # (never a bias)


@NORMS.register("rmsnorm_offset")
def _rmsnorm_offset(dim: int, *, eps: float, bias: bool) -> nn.Module:
    return OffsetRMSNorm(dim, eps=eps)  # (never a bias)


def make_norm(kind: Norm, dim: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """The norm registered as ``kind``: ``nn.LayerNorm(dim, eps, bias=bias)`` for ``"layernorm"``,
    :class:`RMSNorm` (never a bias) for ``"rmsnorm"``, :class:`OffsetRMSNorm` for ``"rmsnorm_offset"``."""
    return NORMS.get(kind)(dim, eps=eps, bias=bias)
