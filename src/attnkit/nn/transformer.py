"""Encoder and decoder blocks and stacks.

Post-norm (the paper, the default): ``x = LN(x + Dropout(Sublayer(x)))``.
Pre-norm (``norm_first=True``): ``x = x + Dropout(Sublayer(LN(x)))``; pre-norm stacks end with a
final norm. ``LN`` is a LayerNorm or (``norm="rmsnorm"``) an :class:`RMSNorm`. Shapes are ``[B, T, D]``;
boolean masks mean **True = may attend**.

Masks are validated and merged once per stack (:func:`attnkit.nn.masks.prepare_attention`: padding,
causal, sliding window and ALiBi biases in one mask) and every layer receives the prepared result;
the rotary cosines/sines are computed once per stack too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.nn.attention import KVCache, MultiHeadAttention
from attnkit.nn.feedforward import Activation, FeedForward
from attnkit.nn.masks import PreparedAttention, prepare_attention
from attnkit.nn.normalization import Norm, make_norm
from attnkit.nn.positional import RotaryEmbedding, alibi_slopes

__all__ = ["DecoderBlock", "DecoderCache", "EncoderBlock", "LayerCache", "TransformerDecoder", "TransformerEncoder"]


class EncoderBlock(nn.Module):
    """Self-attention and feed-forward, each wrapped in residual + dropout + LayerNorm.

    Args:
        d_model: model width ``D``.
        num_heads: attention heads (must divide ``d_model`` unless ``head_dim`` is given).
        dim_feedforward: hidden width of the feed-forward network.
        dropout: dropout on attention weights, inside the feed-forward, and on each residual branch.
        activation: ``"relu"`` (paper), ``"gelu"``, ``"gelu_tanh"`` or ``"swiglu"``.
        norm_first: pre-norm instead of the paper's post-norm.
        head_dim: per-head width (default ``d_model // num_heads``).
        bias: biases in the linear layers and LayerNorms.
        layer_norm_eps: the norms' epsilon.
        rotary: a :class:`RotaryEmbedding` for the self-attention's queries and keys.
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        num_kv_heads: key/value heads of the self-attention (grouped-query; ``None`` = ``num_heads``).
        qkv_bias: biases of the query/key/value projections (``None`` = follow ``bias``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: Activation = "relu",
        norm_first: bool = False,
        head_dim: int | None = None,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
        rotary: RotaryEmbedding | None = None,
        norm: Norm = "layernorm",
        num_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(
            d_model,
            num_heads,
            head_dim=head_dim,
            num_kv_heads=num_kv_heads,
            bias=bias,
            qkv_bias=qkv_bias,
            dropout=dropout,
            rotary=rotary,
        )
        self.ff = FeedForward(d_model, dim_feedforward, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

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
        if self.norm_first:
            a, weights = self.self_attn(self.norm1(x), need_weights=need_weights, **masks)
            x = x + self.dropout1(a)
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, weights = self.self_attn(x, need_weights=need_weights, **masks)
            x = self.norm1(x + self.dropout1(a))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, weights


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


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder memory, and feed-forward.

    With ``cross_attention=False`` the block has no cross-attention (a GPT-style block for
    decoder-only language models). Arguments as :class:`EncoderBlock`.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: Activation = "relu",
        norm_first: bool = False,
        head_dim: int | None = None,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
        cross_attention: bool = True,
        rotary: RotaryEmbedding | None = None,
        norm: Norm = "layernorm",
        num_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        attn_kw: dict[str, Any] = dict(
            head_dim=head_dim, num_kv_heads=num_kv_heads, bias=bias, qkv_bias=qkv_bias, dropout=dropout
        )
        self.self_attn = MultiHeadAttention(d_model, num_heads, rotary=rotary, **attn_kw)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, **attn_kw) if cross_attention else None
        self.ff = FeedForward(d_model, dim_feedforward, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias) if cross_attention else None
        self.norm3 = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

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
        if self.norm_first:
            a, self_weights = self.self_attn(self.norm1(x), **self_kw)
            x = x + self.dropout1(a)
            if self.cross_attn is not None:
                assert self.norm2 is not None
                a, cross_weights = self.cross_attn(self.norm2(x), memory, **cross_kw)
                x = x + self.dropout2(a)
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, self_weights = self.self_attn(x, **self_kw)
            x = self.norm1(x + self.dropout1(a))
            if self.cross_attn is not None:
                assert self.norm2 is not None
                a, cross_weights = self.cross_attn(x, memory, **cross_kw)
                x = self.norm2(x + self.dropout2(a))
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x, self_weights, cross_weights


class _Stack(nn.Module):
    """What encoder and decoder stacks share: the positional options inside attention (rotary,
    ALiBi), the sliding window, and preparing the self-attention's mask once per forward."""

    alibi_slopes: Tensor | None

    def _setup(
        self,
        d_model: int,
        num_heads: int,
        head_dim: int | None,
        *,
        rotary: bool,
        rope_theta: float,
        rope_scaling: Mapping[str, Any] | None,
        alibi: bool,
        sliding_window: int | None,
    ) -> RotaryEmbedding | None:
        if rotary and alibi:
            raise ValueError("choose rotary or alibi positions, not both")
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"sliding_window must be None or >= 1, got {sliding_window}")
        if rope_scaling is not None and not rotary:
            raise ValueError("rope_scaling needs rotary=True")
        self.num_heads = num_heads
        self.sliding_window = sliding_window
        self.register_buffer("alibi_slopes", alibi_slopes(num_heads) if alibi else None, persistent=False)
        if not rotary:
            self.rotary = None
            return None
        scaling = dict(rope_scaling or {})
        scaling_type = scaling.pop("type", None)
        if scaling_type is not None:
            scaling["scaling"] = scaling_type
        dim = head_dim if head_dim is not None else d_model // max(num_heads, 1)
        self.rotary = RotaryEmbedding(dim, base=rope_theta, **scaling)
        return self.rotary

    def _prepare_self(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
        past: int,
        positions: Tensor | None,
        names: tuple[str, str],
    ) -> PreparedAttention:
        if x.dim() != 3:
            raise ValueError(f"x must be [batch, seq, features], got shape {tuple(x.shape)}")
        batch, q_len = x.shape[0], x.shape[1]
        prepared = prepare_attention(
            attn_mask,
            key_padding_mask,
            batch=batch,
            q_len=q_len,
            k_len=past + q_len,
            num_heads=self.num_heads,
            is_causal=is_causal,
            window=self.sliding_window,
            alibi_slopes=self.alibi_slopes,
            need_weights=need_weights,
            dtype=x.dtype,
            device=x.device,
            names=names,
        )
        if self.rotary is not None:
            if positions is None:
                positions = torch.arange(past, past + q_len, device=x.device)
            elif positions.shape not in ((q_len,), (batch, q_len)):
                raise ValueError(
                    f"positions has shape {tuple(positions.shape)}; expected [T]=[{q_len}] or [B, T]=[{batch}, {q_len}]"
                )
            prepared.rope = self.rotary.cos_sin(positions, x.dtype)
        return prepared


_STACK_DOC = """
    Takes the arguments of its blocks, and:

    Args:
        num_layers: number of blocks.
        final_norm: a norm after the last block; by default on for pre-norm stacks (whose blocks leave
            their output un-normalised) and off for post-norm stacks.
        rotary: rotary position embeddings inside every self-attention (``rope_theta`` its base,
            ``rope_scaling`` a mapping ``{"type": "linear" | "dynamic" | "llama3", "factor": ...,
            "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}``, see
            :func:`attnkit.nn.positional.rope_inv_freq`).
        alibi: ALiBi biases ``-slope_h * distance`` on the self-attention scores.
        sliding_window: each query attends to at most the last ``sliding_window`` keys, itself included.
"""


class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` :class:`EncoderBlock` s."""

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: Activation = "relu",
        norm_first: bool = False,
        head_dim: int | None = None,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
        final_norm: bool | None = None,
        rotary: bool = False,
        norm: Norm = "layernorm",
        num_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        rope_theta: float = 10000.0,
        rope_scaling: Mapping[str, Any] | None = None,
        alibi: bool = False,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        rope = self._setup(
            d_model,
            num_heads,
            head_dim,
            rotary=rotary,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            alibi=alibi,
            sliding_window=sliding_window,
        )
        self.layers = nn.ModuleList(
            EncoderBlock(
                d_model,
                num_heads,
                dim_feedforward,
                dropout,
                activation=activation,
                norm_first=norm_first,
                head_dim=head_dim,
                bias=bias,
                layer_norm_eps=layer_norm_eps,
                rotary=rope,
                norm=norm,
                num_kv_heads=num_kv_heads,
                qkv_bias=qkv_bias,
            )
            for _ in range(num_layers)
        )
        use_final_norm = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias) if use_final_norm else None

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``. Masks as :meth:`EncoderBlock.forward`; ``positions``
        (``[T]`` or ``[B, T]``) are the rotary positions (default ``0 .. T-1``)."""
        return self._run(x, attn_mask, key_padding_mask, is_causal, positions, need_weights=False)[0]

    def forward_with_attention(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """The output and, per layer, the attention weights ``[B, H, T, T]`` of the same pass."""
        return self._run(x, attn_mask, key_padding_mask, is_causal, positions, need_weights=True)

    def get_attention_maps(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> list[Tensor]:
        """Per layer, the attention weights ``[B, H, T, T]`` for input ``x``."""
        return self.forward_with_attention(
            x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal
        )[1]

    def _run(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        positions: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[Tensor]]:
        prepared = self._prepare_self(
            x, attn_mask, key_padding_mask, is_causal, need_weights, 0, positions, ("attn_mask", "key_padding_mask")
        )
        maps: list[Tensor] = []
        for layer in self.layers:
            x, weights = layer(x, need_weights=need_weights, prepared=prepared)
            if weights is not None:
                maps.append(weights)
        if self.norm is not None:
            x = self.norm(x)
        return x, maps


class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` :class:`DecoderBlock` s (arguments as :class:`TransformerEncoder`).

    With ``cross_attention=False`` the blocks have no cross-attention: the stack of a
    decoder-only (GPT-style) language model. Incremental decoding: ``cache = decoder.new_cache()``,
    then call the decoder with only the new positions and ``cache=cache``.
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: Activation = "relu",
        norm_first: bool = False,
        head_dim: int | None = None,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
        final_norm: bool | None = None,
        cross_attention: bool = True,
        rotary: bool = False,
        norm: Norm = "layernorm",
        num_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        rope_theta: float = 10000.0,
        rope_scaling: Mapping[str, Any] | None = None,
        alibi: bool = False,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        rope = self._setup(
            d_model,
            num_heads,
            head_dim,
            rotary=rotary,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            alibi=alibi,
            sliding_window=sliding_window,
        )
        self.layers = nn.ModuleList(
            DecoderBlock(
                d_model,
                num_heads,
                dim_feedforward,
                dropout,
                activation=activation,
                norm_first=norm_first,
                head_dim=head_dim,
                bias=bias,
                layer_norm_eps=layer_norm_eps,
                cross_attention=cross_attention,
                rotary=rope,
                norm=norm,
                num_kv_heads=num_kv_heads,
                qkv_bias=qkv_bias,
            )
            for _ in range(num_layers)
        )
        use_final_norm = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps=layer_norm_eps, bias=bias) if use_final_norm else None

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with this stack."""
        return DecoderCache(len(self.layers))

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
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x [B, T, D]`` (only the new positions when ``cache`` is given) -> ``[B, T, D]``.

        Masks as :meth:`DecoderBlock.forward` (True = may attend); ``positions`` (``[T]`` or ``[B, T]``)
        are the rotary positions of the new tokens (default ``past .. past + T - 1``).
        """
        out, _, _ = self._run(
            x,
            memory,
            tgt_mask,
            tgt_key_padding_mask,
            memory_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            cache,
            positions,
            False,
        )
        return out

    def forward_with_attention(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        tgt_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = True,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The output and, per layer, self-attention ``[B, H, Tq, Tk]`` and cross-attention
        ``[B, H, Tq, Tm]`` weights of the same pass (the cross list is empty without cross-attention)."""
        return self._run(
            x,
            memory,
            tgt_mask,
            tgt_key_padding_mask,
            memory_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            cache,
            positions,
            True,
        )

    def get_attention_maps(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        **kwargs: object,
    ) -> dict[str, list[Tensor]]:
        """``{"self": [per-layer [B, H, Tq, Tk]], "cross": [per-layer [B, H, Tq, Tm]]}``."""
        _, self_maps, cross_maps = self.forward_with_attention(x, memory, **kwargs)  # type: ignore[arg-type]
        return {"self": self_maps, "cross": cross_maps}

    def _run(
        self,
        x: Tensor,
        memory: Tensor | None,
        tgt_mask: Tensor | None,
        tgt_key_padding_mask: Tensor | None,
        memory_mask: Tensor | None,
        memory_key_padding_mask: Tensor | None,
        tgt_is_causal: bool,
        cache: DecoderCache | None,
        positions: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        if cache is not None and len(cache.layers) != len(self.layers):
            raise ValueError(
                f"cache has {len(cache.layers)} layers, the decoder {len(self.layers)}: use decoder.new_cache()"
            )
        past = cache.length if cache is not None else 0
        prepared_self = self._prepare_self(
            x,
            tgt_mask,
            tgt_key_padding_mask,
            tgt_is_causal,
            need_weights,
            past,
            positions,
            ("tgt_mask", "tgt_key_padding_mask"),
        )
        prepared_cross = None
        memory_len = _memory_length(memory, cache)
        if memory_len is not None:
            prepared_cross = prepare_attention(
                memory_mask,
                memory_key_padding_mask,
                batch=x.shape[0],
                q_len=x.shape[1],
                k_len=memory_len,
                num_heads=self.num_heads,
                need_weights=need_weights,
                dtype=x.dtype,
                device=x.device,
                names=("memory_mask", "memory_key_padding_mask"),
            )
        self_maps: list[Tensor] = []
        cross_maps: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            x, self_w, cross_w = layer(
                x,
                memory,
                need_weights=need_weights,
                cache=cache.layers[i] if cache is not None else None,
                prepared_self=prepared_self,
                prepared_cross=prepared_cross,
            )
            if self_w is not None:
                self_maps.append(self_w)
            if cross_w is not None:
                cross_maps.append(cross_w)
        if self.norm is not None:
            x = self.norm(x)
        return x, self_maps, cross_maps


def _memory_length(memory: Tensor | None, cache: DecoderCache | None) -> int | None:
    """Length of the cross-attention keys: the memory's, or the cached one's; ``None`` without either."""
    if memory is not None and memory.dim() == 3:
        return memory.shape[1]
    if cache is not None and cache.layers and not cache.layers[0].cross_attn.empty:
        return cache.layers[0].cross_attn.length
    return None


TransformerEncoder.__doc__ = (TransformerEncoder.__doc__ or "") + _STACK_DOC
TransformerDecoder.__doc__ = (TransformerDecoder.__doc__ or "") + _STACK_DOC
