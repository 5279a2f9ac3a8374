"""Positional encodings: sinusoidal (the paper's), learned, rotary (RoPE, with context-extension
scaling) and ALiBi slopes.

Sinusoidal and learned encodings are added to ``x`` of shape ``[B, T, D]``; ``offset`` is the
position of ``x[:, 0]`` (non-zero during cached decoding), or ``positions [B, T]`` gives each row its
own (left-padded batches). Rotary embeddings rotate per-head queries and keys ``[B, H, T, head_dim]``
inside attention; ALiBi adds ``-slope * distance`` to the attention scores (see
:func:`attnkit.nn.masks.prepare_attention`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Self

import torch
from torch import Tensor, nn

from attnkit.nn.specs import StackSpec

__all__ = [
    "LearnedPositionalEncoding",
    "PositionalEncoding",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "alibi_slopes",
    "apply_rotary",
    "rope_inv_freq",
    "sinusoidal_encoding",
]


class PositionalEncoding(nn.Module):
    """Base class of the positional-encoding kinds (:data:`attnkit.nn.POSITIONS`); every hook does nothing.

    A kind is built from a :class:`attnkit.nn.StackSpec` (:meth:`from_spec`) and may act in two places,
    which its class attributes declare:

    * ``adds_to_embeddings``: :meth:`add` adds positions to the embeddings ``[B, T, D]`` (sinusoidal,
      learned). The *model* builds it (:func:`attnkit.nn.embedding_positions`) and calls ``add``.
    * ``acts_in_attention``: the *stack* builds it (:func:`attnkit.nn.attention_positions`) and, once
      per forward, asks it for an additive score bias (:meth:`attention_bias`, ALiBi) and for the
      rotary cosines/sines of the queries and keys (:meth:`rope`, RoPE).
    """

    adds_to_embeddings: ClassVar[bool] = False
    acts_in_attention: ClassVar[bool] = False

    @classmethod
    def from_spec(cls, spec: StackSpec) -> Self:
        """The kind for a stack of ``spec`` (widths, heads, ``max_len``, ``rope_theta``...)."""
        return cls()

    def add(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """``x [B, T, D]`` with positions ``offset ..`` (or ``positions [B, T]`` per row) added."""
        return x

    def attention_bias(self, q_len: int, k_len: int, device: torch.device) -> Tensor | None:
        """A float bias broadcastable to ``[B, H, Tq, Tk]`` added to the self-attention scores (the
        queries are the last ``Tq`` of ``Tk`` positions); ``None`` for none."""
        return None

    def rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        """Rotary ``(cos, sin)`` of ``positions`` (``[T]`` or ``[B, T]``) for the self-attention's queries
        and keys; ``None`` for none."""
        return None

    def rotary_embedding(self) -> RotaryEmbedding | None:
        """The :class:`RotaryEmbedding` the blocks' self-attention applies when called without a stack."""
        return None


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


class SinusoidalPositionalEncoding(PositionalEncoding):
    """Adds the fixed sinusoidal encoding to ``x [B, T, D]``.

    The table is a non-persistent buffer of ``max_len`` rows, built up front. A longer sequence
    is not an error: the formula holds for any position, so the table is extended (to the next
    power of two) on first use and kept.
    """

    pe: Tensor
    adds_to_embeddings = True

    def __init__(self, dim: int, max_len: int = 5000, *, base: float = 10000.0) -> None:
        super().__init__()
        self.dim = dim
        self.base = base
        self.register_buffer("pe", sinusoidal_encoding(max_len, dim, base=base), persistent=False)

    @classmethod
    def from_spec(cls, spec: StackSpec) -> Self:
        return cls(spec.d_model, spec.max_len)

    def add(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        return self(x, offset, positions)

    def encoding(self, length: int, offset: int = 0) -> Tensor:
        """Rows ``offset .. offset + length`` of the table, ``[length, D]``."""
        end = offset + length
        if end > self.pe.shape[0]:
            new_len = 1 << (end - 1).bit_length()
            self.pe = sinusoidal_encoding(new_len, self.dim, base=self.base, device=self.pe.device)
        return self.pe[offset:end]

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """``x [B, T, D]`` plus the encoding of positions ``offset ..``, or of ``positions [B, T]`` per row."""
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        if positions is not None:
            table = self.encoding(int(positions.max()) + 1 if positions.numel() else 0)
            return x + table[positions].to(x.dtype)
        return x + self.encoding(x.shape[-2], offset).to(x.dtype)


class LearnedPositionalEncoding(PositionalEncoding):
    """Adds a learned embedding per position to ``x [B, T, D]``; at most ``max_len`` positions."""

    adds_to_embeddings = True

    @classmethod
    def from_spec(cls, spec: StackSpec) -> Self:
        return cls(spec.d_model, spec.max_len)

    def add(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        return self(x, offset, positions)

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        self.dim = dim
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, dim)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """``x [B, T, D]`` plus the embedding of positions ``offset ..``, or of ``positions [B, T]`` per row."""
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {self.dim}")
        if positions is not None:
            end = int(positions.max()) + 1 if positions.numel() else 0
            if end > self.max_len:
                raise ValueError(
                    f"positions reach {end} but the learned positional encoding has max_len={self.max_len}; "
                    "truncate the input or build the model with a larger max_len"
                )
            return x + self.embedding(positions).to(x.dtype)
        end = offset + x.shape[-2]
        if end > self.max_len:
            raise ValueError(
                f"sequence reaches position {end} but the learned positional encoding has max_len={self.max_len}; "
                "truncate the input or build the model with a larger max_len"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


RopeScalingType = Literal["linear", "dynamic", "llama3"]


def rope_inv_freq(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: RopeScalingType | None = None,
    factor: float = 1.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position_embeddings: int = 8192,
    seq_len: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """RoPE inverse frequencies ``[dim / 2]``, as Hugging Face transformers' ``rope_type`` init functions.

    * ``None``: ``base^(-2i/dim)``.
    * ``"linear"``: divided by ``factor`` (positions interpolated ``factor`` times more finely).
    * ``"dynamic"`` (NTK-aware): for ``seq_len > original_max_position_embeddings`` the base becomes
      ``base * (factor * seq_len / original - (factor - 1)) ^ (dim / (dim - 2))``; unchanged otherwise.
    * ``"llama3"``: wavelengths longer than ``original / low_freq_factor`` divided by ``factor``,
      shorter than ``original / high_freq_factor`` kept, those between smoothly interpolated.
    """
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    if scaling == "dynamic" and seq_len is not None and seq_len > original_max_position_embeddings:
        ratio = factor * seq_len / original_max_position_embeddings - (factor - 1)
        base = base * ratio ** (dim / (dim - 2))
    inv_freq = 1.0 / (base**exponents)
    if scaling == "linear":
        inv_freq = inv_freq / factor
    elif scaling == "llama3":
        low_freq_wavelen = original_max_position_embeddings / low_freq_factor
        high_freq_wavelen = original_max_position_embeddings / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif scaling not in (None, "dynamic"):
        raise ValueError(f"unknown RoPE scaling {scaling!r}; choose one of linear, dynamic, llama3 (or None)")
    return inv_freq


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x [..., T, dim]`` by angles whose cosines/sines (broadcastable, ``[..., T, dim]``) are given.

    Rotate-half layout (Hugging Face's): pairs ``(x[i], x[i + dim/2])``.
    """
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    if cos.dtype != x.dtype:  # (a cast to the same dtype is a no-op, but a dispatched one: per layer, per token)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotated * sin


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021) for ``[..., T, dim]`` queries/keys.

    Pairs ``(x[i], x[i + dim/2])`` are rotated by the angle ``position * inv_freq[i]`` (Hugging Face's
    rotate-half layout), so that ``q·k`` depends on the relative position only. Works for any length.

    Args:
        dim: the (even) head dimension.
        base: ``rope_theta``; ``inv_freq[i] = base^(-2i/dim)`` before scaling.
        scaling, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings:
            context-extension scaling, see :func:`rope_inv_freq` (``"dynamic"`` recomputes the
            frequencies from the largest position of each call, as transformers' dynamic RoPE).
    """

    inv_freq: Tensor

    def __init__(
        self,
        dim: int,
        *,
        base: float = 10000.0,
        scaling: RopeScalingType | None = None,
        factor: float = 1.0,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
        original_max_position_embeddings: int = 8192,
    ) -> None:
        super().__init__()
        if dim % 2 != 0:
            raise ValueError(f"rotary embedding needs an even head dimension, got {dim}")
        if base <= 0:
            raise ValueError(f"rotary base (rope_theta) must be positive, got {base}")
        if scaling is not None and factor <= 0:
            raise ValueError(f"RoPE scaling factor must be positive, got {factor}")
        if scaling == "llama3" and not high_freq_factor > low_freq_factor:
            raise ValueError(
                "llama3 RoPE scaling needs high_freq_factor > low_freq_factor, "
                f"got {high_freq_factor} and {low_freq_factor}"
            )
        self.dim = dim
        self.base = base
        self.scaling = scaling
        self._params: dict[str, Any] = dict(
            factor=factor,
            low_freq_factor=low_freq_factor,
            high_freq_factor=high_freq_factor,
            original_max_position_embeddings=original_max_position_embeddings,
        )
        self.register_buffer("inv_freq", self._inv_freq(None), persistent=False)

    def _inv_freq(self, seq_len: int | None, device: torch.device | None = None) -> Tensor:
        return rope_inv_freq(
            self.dim, base=self.base, scaling=self.scaling, seq_len=seq_len, device=device, **self._params
        )

    def cos_sin(self, positions: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """Cosines and sines ``[T, dim]`` for positions ``[T]``, or ``[B, 1, T, dim]`` for per-row ``[B, T]``."""
        inv_freq = self.inv_freq
        if self.scaling == "dynamic" and positions.numel():
            seq_len = int(positions.max()) + 1
            if seq_len > self._params["original_max_position_embeddings"]:
                inv_freq = self._inv_freq(seq_len, positions.device)
        angles = positions.float().unsqueeze(-1) * inv_freq  # [..., T, dim/2]
        emb = torch.cat([angles, angles], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if positions.dim() == 2:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        if dtype is not None:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos, sin

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """Rotate ``x [..., T, dim]``: positions ``offset .. offset + T``, or ``positions`` ``[T]`` / ``[B, T]``
        (per row, for ``x [B, H, T, dim]``)."""
        if x.shape[-1] != self.dim:
            raise ValueError(f"rotary embedding built for dim {self.dim}, got input of shape {tuple(x.shape)}")
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[-2], device=x.device)
        cos, sin = self.cos_sin(positions, x.dtype)
        return apply_rotary(x, cos, sin)


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes ``[num_heads]`` (Press et al. 2022; BLOOM's ``build_alibi_tensor``).

    For ``n`` a power of two the geometric sequence ``2^(-8/n), 2^(-16/n), ...``; otherwise the
    slopes of the closest smaller power of two followed by every other slope of the next one.
    """
    if num_heads < 1:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = torch.pow(torch.tensor(base), torch.arange(1, 1 + closest, dtype=torch.float32))
    if closest != num_heads:
        extra_base = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, num_heads - closest)
        extra = torch.pow(torch.tensor(extra_base), torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.float32))
        slopes = torch.cat([slopes, extra])
    return slopes
