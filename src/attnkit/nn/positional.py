"""Positional encodings: sinusoidal (the paper's), learned, and rotary (RoPE).

Sinusoidal and learned encodings are added to ``x`` of shape ``[B, T, D]``; ``offset`` is the
position of ``x[:, 0]`` (non-zero during cached decoding). Rotary embeddings rotate per-head
queries and keys ``[B, H, T, head_dim]`` inside attention.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["LearnedPositionalEncoding", "RotaryEmbedding", "SinusoidalPositionalEncoding", "sinusoidal_encoding"]


def sinusoidal_encoding(
    length: int, dim: int, *, base: float = 10000.0, device: torch.device | str | None = None
) -> Tensor:
    """The paper's encoding ``[length, dim]``: ``PE[p, 2i] = sin(p / base^(2i/dim))``, ``PE[p, 2i+1] = cos(...)``."""
    position = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=device) * (-math.log(base) / dim))
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: dim // 2])
    return pe


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to ``x [B, T, D]``.

    The table is a non-persistent buffer of ``max_len`` rows, built up front. A longer sequence
    is not an error: the formula holds for any position, so the table is extended (to the next
    power of two) on first use and kept.
    """

    pe: Tensor

    def __init__(self, dim: int, max_len: int = 5000, *, base: float = 10000.0) -> None:
        super().__init__()
        self.dim = dim
        self.base = base
        self.register_buffer("pe", sinusoidal_encoding(max_len, dim, base=base), persistent=False)

    def encoding(self, length: int, offset: int = 0) -> Tensor:
        """Rows ``offset .. offset + length`` of the table, ``[length, D]``."""
        end = offset + length
        if end > self.pe.shape[0]:
            new_len = 1 << (end - 1).bit_length()
            self.pe = sinusoidal_encoding(new_len, self.dim, base=self.base, device=self.pe.device)
        return self.pe[offset:end]

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        return x + self.encoding(x.shape[-2], offset).to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned embedding per position to ``x [B, T, D]``; at most ``max_len`` positions."""

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        self.dim = dim
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, dim)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        end = offset + x.shape[-2]
        if end > self.max_len:
            raise ValueError(
                f"sequence reaches position {end} but the learned positional encoding has max_len={self.max_len}; "
                "truncate the input or build the model with a larger max_len"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021) for ``[..., T, dim]`` queries/keys.

    Pairs ``(x[i], x[i + dim/2])`` are rotated by the angle ``position * base^(-2i/dim)``, so
    that ``q·k`` depends on the relative position only. Works for any length.
    """

    inv_freq: Tensor

    def __init__(self, dim: int, *, base: float = 10000.0) -> None:
        super().__init__()
        if dim % 2 != 0:
            raise ValueError(f"rotary embedding needs an even head dimension, got {dim}")
        self.dim = dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"rotary embedding built for dim {self.dim}, got input of shape {tuple(x.shape)}")
        length = x.shape[-2]
        positions = torch.arange(offset, offset + length, device=x.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)  # [T, dim/2]
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * cos + rotated * sin
