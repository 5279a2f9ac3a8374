"""Normalisation layers: LayerNorm (torch's) and RMSNorm (LLaMA's), chosen by name."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

__all__ = ["NORMS", "Norm", "RMSNorm", "make_norm"]

Norm = Literal["layernorm", "rmsnorm"]
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")


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


def make_norm(kind: Norm, dim: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """``nn.LayerNorm(dim, eps, bias=bias)`` for ``"layernorm"``, :class:`RMSNorm` (never a bias) for ``"rmsnorm"``."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"unknown norm {kind!r}; choose one of {list(NORMS)}")
