"""Encoder and decoder blocks, built from a :class:`attnkit.nn.BlockSpec`; the decoder's key/value caches.

Post-norm (the paper, the default): ``x = LN(x + Dropout(Sublayer(x)))``.
Pre-norm (``norm_first=True``): ``x = x + Dropout(Sublayer(LN(x)))``; with ``sandwich_norm`` (Gemma 2/3)
``x = x + Dropout(LN'(Sublayer(LN(x))))``. ``LN`` is the spec's norm (:data:`attnkit.nn.NORMS`). Shapes
are ``[B, T, D]``; boolean masks mean **True = may attend**.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.nn.attention import KVCache, MultiHeadAttention
from attnkit.nn.dropout import Dropout
from attnkit.nn.feedforward import FeedForward
from attnkit.nn.hooks import HookPoint
from attnkit.nn.masks import PreparedAttention
from attnkit.nn.normalization import make_norm
from attnkit.nn.positional import RotaryEmbedding
from attnkit.nn.specs import BlockSpec

__all__ = ["DecoderBlock", "DecoderCache", "EncoderBlock", "LayerCache"]


def _attention(spec: BlockSpec, rotary: RotaryEmbedding | None) -> MultiHeadAttention:
    return MultiHeadAttention(
        spec.d_model,
        spec.num_heads,
        head_dim=spec.head_dim,
        num_kv_heads=spec.num_kv_heads,
        bias=spec.bias,
        qkv_bias=spec.qkv_bias,
        dropout=spec.dropout,
        rotary=rotary,
        q_norm=_head_norm(spec) if spec.qk_norm else None,
        k_norm=_head_norm(spec) if spec.qk_norm else None,
        scale=spec.attn_scale,
    )


def _head_norm(spec: BlockSpec) -> nn.Module:
    """A norm over one head's width (``qk_norm``)."""
    return make_norm(spec.norm, spec.attention_head_dim, eps=spec.layer_norm_eps, bias=spec.bias)


def _feedforward(spec: BlockSpec) -> FeedForward:
    return FeedForward(
        spec.d_model, spec.dim_feedforward, dropout=spec.dropout, activation=spec.activation, bias=spec.bias
    )


def _norm(spec: BlockSpec) -> nn.Module:
    return make_norm(spec.norm, spec.d_model, eps=spec.layer_norm_eps, bias=spec.bias)


def _out_norms(spec: BlockSpec) -> tuple[nn.Module | None, nn.Module | None]:
    """The norms of the attention's and of the feed-forward's outputs (``sandwich_norm``), or ``None`` s."""
    if not spec.sandwich_norm:
        return None, None
    if not spec.norm_first:
        raise ValueError("sandwich_norm=True needs norm_first=True (it norms a pre-norm block's sublayer outputs)")
    return _norm(spec), _norm(spec) if spec.mlp else None


class EncoderBlock(nn.Module):
    """Self-attention and feed-forward, each wrapped in residual + dropout + LayerNorm.

    Built from a :class:`BlockSpec`; ``rotary``: a :class:`RotaryEmbedding` for the self-attention's
    queries and keys (a stack with rotary positions passes its own).
    """

    def __init__(self, spec: BlockSpec, *, rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        if not spec.mlp:
            raise ValueError("mlp=False (attention-only blocks) is a decoder block option; encoder blocks have an MLP")
        self.norm_first = spec.norm_first
        self.self_attn = _attention(spec, rotary)
        self.ff = _feedforward(spec)
        self.norm1 = _norm(spec)
        self.norm2 = _norm(spec)
        self.attn_out_norm, self.mlp_out_norm = _out_norms(spec)
        self.dropout1 = Dropout(spec.dropout)
        self.dropout2 = Dropout(spec.dropout)
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid = HookPoint(), HookPoint(), HookPoint()
        self.hook_mlp_out, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        prepared: PreparedAttention | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x [B, T, D]`` -> ``(x [B, T, D], weights [B, H, T, T] or None)``.

        ``attn_mask`` (True = may attend) is ``[T, T]``, ``[B, T, T]`` or ``[B, H, T, T]``;
        ``key_padding_mask`` is ``[B, T]``, True at real tokens. A stack passes ``prepared``
        (:func:`attnkit.nn.masks.prepare_attention`) instead of the three.
        """
        masks: dict[str, Any] = dict(
            attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal, prepared=prepared
        )
        x = self.hook_resid_pre(x)
        if self.norm_first:
            a, weights = self.self_attn(self.norm1(x), need_weights=need_weights, **masks)
            a = a if self.attn_out_norm is None else self.attn_out_norm(a)
            x = self.hook_resid_mid(x + self.dropout1(self.hook_attn_out(a)))
            m = self.ff(self.norm2(x))
            m = m if self.mlp_out_norm is None else self.mlp_out_norm(m)
            x = x + self.dropout2(self.hook_mlp_out(m))
        else:
            a, weights = self.self_attn(x, need_weights=need_weights, **masks)
            x = self.hook_resid_mid(self.norm1(x + self.dropout1(self.hook_attn_out(a))))
            x = self.norm2(x + self.dropout2(self.hook_mlp_out(self.ff(x))))
        return self.hook_resid_post(x), weights


@dataclass
class LayerCache:
    """Key/value caches of one decoder block: its self-attention and its cross-attention."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


class DecoderCache:
    """Caches of every block of a :class:`TransformerDecoder` for incremental decoding."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        """Number of target positions decoded so far."""
        return self.layers[0].self_attn.length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every layer (beam search)."""
        for layer in self.layers:
            layer.reorder(index)

    def merge(self, other: DecoderCache) -> None:
        """Add the rows of ``other`` (a cache of the same decoder) after these rows, left-padding the side
        with fewer positions (see :meth:`KVCache.merge`; mask the padding out, True = real token)."""
        if len(other.layers) != len(self.layers):
            raise ValueError(f"cannot merge a {len(other.layers)}-layer cache into a {len(self.layers)}-layer one")
        for mine, theirs in zip(self.layers, other.layers):
            if not (mine.cross_attn.empty and theirs.cross_attn.empty):
                raise ValueError("merge joins decoder-only caches; these hold cross-attention keys/values")
            mine.self_attn.merge(theirs.self_attn)

    def drop_left(self, n: int) -> None:
        """Drop the first ``n`` positions of every row in every layer (see :meth:`KVCache.drop_left`)."""
        for layer in self.layers:
            layer.self_attn.drop_left(n)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder memory, and feed-forward.

    With ``spec.cross_attention=False`` the block has no cross-attention (a GPT-style block for
    decoder-only language models). With ``spec.mlp=False`` it has no feed-forward sublayer (an attention-only
    block: ``ff`` and ``norm3`` are ``None``, the output is the residual stream after the attention); its
    ``hook_mlp_out`` is still there and carries zeros (computed only when a hook is added; what a hook returns
    is added to the residual stream), so code that reads every block's MLP output sees an MLP that writes
    nothing. Arguments as :class:`EncoderBlock`.
    """

    def __init__(self, spec: BlockSpec, *, rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.norm_first = spec.norm_first
        self.self_attn = _attention(spec, rotary)
        self.cross_attn = _attention(spec, None) if spec.cross_attention else None
        self.ff = _feedforward(spec) if spec.mlp else None
        self.norm1 = _norm(spec)
        self.norm2 = _norm(spec) if spec.cross_attention else None
        self.norm3 = _norm(spec) if spec.mlp else None
        if spec.sandwich_norm and spec.cross_attention:
            raise ValueError("sandwich_norm=True is for blocks without cross-attention (cross_attention=False)")
        self.attn_out_norm, self.mlp_out_norm = _out_norms(spec)
        self.dropout1 = Dropout(spec.dropout)
        self.dropout2 = Dropout(spec.dropout)
        self.dropout3 = Dropout(spec.dropout)
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid = HookPoint(), HookPoint(), HookPoint()
        self.hook_mlp_out, self.hook_resid_post = HookPoint(), HookPoint()
        if self.cross_attn is not None:  # after the cross-attention, and its residual
            self.hook_cross_attn_out, self.hook_resid_mid_cross = HookPoint(), HookPoint()

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        tgt_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = True,
        need_weights: bool = False,
        cache: LayerCache | None = None,
        prepared_self: PreparedAttention | None = None,
        prepared_cross: PreparedAttention | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``x [B, Tq, D]``, ``memory [B, Tm, D]`` -> ``(x, self-attention weights, cross-attention weights)``.

        Masks are True = may attend: ``tgt_mask`` ``[Tq, Tk]``/``[B, Tq, Tk]``/``[B, H, Tq, Tk]``,
        ``tgt_key_padding_mask`` ``[B, Tk]`` (``Tk`` includes cached positions),
        ``memory_mask`` ``[Tq, Tm]``/..., ``memory_key_padding_mask`` ``[B, Tm]``.
        ``tgt_is_causal`` (default True) adds the causal mask to the self-attention.
        A stack passes ``prepared_self`` / ``prepared_cross`` (:func:`attnkit.nn.masks.prepare_attention`)
        instead of the self- / cross-attention masks.
        """
        if self.cross_attn is None and memory is not None:
            raise ValueError("this DecoderBlock was built with cross_attention=False; do not pass memory")
        if self.cross_attn is not None and memory is None and (cache is None or cache.cross_attn.empty):
            raise ValueError("this DecoderBlock has cross-attention: pass the encoder output as memory")
        self_kw: dict[str, Any] = dict(need_weights=need_weights, cache=cache.self_attn if cache is not None else None)
        if prepared_self is not None:
            self_kw["prepared"] = prepared_self
        else:
            self_kw.update(attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask, is_causal=tgt_is_causal)
        cross_kw: dict[str, Any] = dict(
            need_weights=need_weights, cache=cache.cross_attn if cache is not None else None
        )
        if prepared_cross is not None:
            cross_kw["prepared"] = prepared_cross
        else:
            cross_kw.update(attn_mask=memory_mask, key_padding_mask=memory_key_padding_mask)
        cross_weights = None
        x = self.hook_resid_pre(x)
        if self.norm_first:
            a, self_weights = self.self_attn(self.norm1(x), **self_kw)
            a = a if self.attn_out_norm is None else self.attn_out_norm(a)
            x = self.hook_resid_mid(x + self.dropout1(self.hook_attn_out(a)))
            if self.cross_attn is not None:
                assert self.norm2 is not None
                a, cross_weights = self.cross_attn(self.norm2(x), memory, **cross_kw)
                x = self.hook_resid_mid_cross(x + self.dropout2(self.hook_cross_attn_out(a)))
            if self.ff is not None and self.norm3 is not None:
                m = self.ff(self.norm3(x))
                m = m if self.mlp_out_norm is None else self.mlp_out_norm(m)
                x = x + self.dropout3(self.hook_mlp_out(m))
            elif self.hook_mlp_out.fns:  # attention-only: an MLP output of zeros, for the hooks
                x = x + self.hook_mlp_out(torch.zeros_like(x))
        else:
            a, self_weights = self.self_attn(x, **self_kw)
            x = self.hook_resid_mid(self.norm1(x + self.dropout1(self.hook_attn_out(a))))
            if self.cross_attn is not None:
                assert self.norm2 is not None
                a, cross_weights = self.cross_attn(x, memory, **cross_kw)
                x = self.hook_resid_mid_cross(self.norm2(x + self.dropout2(self.hook_cross_attn_out(a))))
            if self.ff is not None and self.norm3 is not None:
                x = self.norm3(x + self.dropout3(self.hook_mlp_out(self.ff(x))))
            elif self.hook_mlp_out.fns:  # attention-only: an MLP output of zeros, for the hooks
                x = x + self.hook_mlp_out(torch.zeros_like(x))
        return self.hook_resid_post(x), self_weights, cross_weights
