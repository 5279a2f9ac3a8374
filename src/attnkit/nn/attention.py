"""Scaled dot-product attention and multi-head attention.

Shapes are batch-first: inputs ``[B, T, D]``, per-head tensors ``[B, H, T, head_dim]``,
attention weights ``[B, H, Tq, Tk]``. Boolean masks mean **True = may attend**.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.nn.hooks import HookPoint, through_heads
from attnkit.nn.masks import (
    PreparedAttention,
    check_bool_mask,
    expand_attention_mask,
    finalize_mask,
    masked_fill_value,
)
from attnkit.nn.positional import RotaryEmbedding, apply_rotary

__all__ = ["KVCache", "MultiHeadAttention", "attend", "scaled_dot_product_attention"]


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    r"""softmax(q kᵀ / √d + mask) v, over any leading batch dims.

    Args:
        q: queries ``[..., Hq, Tq, d]``.
        k: keys ``[..., Hkv, Tk, d]``; ``Hkv`` may divide ``Hq`` (grouped-query attention: key/value
            head ``j`` serves query heads ``j * Hq/Hkv .. (j + 1) * Hq/Hkv - 1``).
        v: values ``[..., Hkv, Tk, dv]``.
        mask: boolean, **True = may attend**, broadcastable to ``[..., Tq, Tk]``.
        is_causal: also apply a causal mask, aligned to the bottom right when ``Tq < Tk``
            (the last query is the last key: right for cached decoding).
        dropout_p: dropout on the attention weights (pass 0 in eval mode).
        need_weights: also return the attention weights ``[..., Tq, Tk]`` (before dropout).
        scale: defaults to ``1 / sqrt(d)``.

    Returns:
        ``(out [..., Tq, dv], weights or None)``. A query whose every key is masked gets an
        output (and weights) of zeros, never NaN.

    Without ``need_weights`` this runs the fused :func:`torch.nn.functional.scaled_dot_product_attention`
    kernel; with it, the explicit computation that keeps the weights. Both give the same output.
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same feature size, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k_len != v.shape[-2]:
        raise ValueError(f"k and v must have the same length, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if is_causal and q_len > k_len:
        raise ValueError(f"is_causal: q_len ({q_len}) must not exceed k_len ({k_len}) (queries are the last keys)")
    if mask is not None:
        check_bool_mask(mask, "mask")
        scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q_len, k_len)
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape {scores_shape}"
            )
    prepared = finalize_mask(
        mask, q_len=q_len, k_len=k_len, is_causal=is_causal, need_weights=need_weights, dtype=q.dtype, device=q.device
    )
    return attend(q, k, v, prepared, dropout_p=dropout_p, need_weights=need_weights, scale=scale)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    prepared: PreparedAttention,
    *,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    hooks: tuple[HookPoint, HookPoint] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention with a validated :class:`PreparedAttention` (shapes as :func:`scaled_dot_product_attention`, which
    calls this); ``hooks``: the scores' and the pattern's hook points (hooked: the weights are computed)."""
    mask = prepared.mask
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)  # an additive mask follows the queries' dtype (e.g. under autocast)
    grouped = q.dim() >= 3 and k.shape[-3] != q.shape[-3]
    if grouped and q.shape[-3] % k.shape[-3]:
        raise ValueError(f"{k.shape[-3]} key/value heads must divide {q.shape[-3]} query heads")
    if not need_weights and not (hooks is not None and (hooks[0].fns or hooks[1].fns)):
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=prepared.is_causal,
            scale=scale,
            **({"enable_gqa": True} if grouped else {}),
        )
        weights = None
    else:
        if grouped:
            repeats = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(repeats, dim=-3)
            v = v.repeat_interleave(repeats, dim=-3)
        if prepared.is_causal:  # causality left to the fused kernel (Tq == Tk): made explicit
            mask = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).tril()
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        # In place on the fresh [..., Tq, Tk] scores (autograd needs neither op's input): saves
        # two allocations and passes over the largest tensor here; the values are the same.
        scores = torch.matmul(q, k.transpose(-2, -1)).mul_(scale)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores.masked_fill_(~mask, masked_fill_value(scores.dtype))
            else:
                scores = scores + mask
        weights = torch.softmax(scores if hooks is None else hooks[0](scores), dim=-1)
        weights = weights if hooks is None else hooks[1](weights)
        probs = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
        out = torch.matmul(probs.to(v.dtype), v)

    if prepared.has_key is not None:
        out = out.masked_fill(~prepared.has_key, 0.0)
        if weights is not None:
            weights = weights.masked_fill(~prepared.has_key, 0.0)
    return out, weights


class KVCache:
    """Keys and values of one attention layer, kept across decoding steps.

    Tensors are ``[B, H, T, head_dim]``. A *self-attention* cache grows by the new positions at every call
    (stored in a buffer that doubles when full, so decoding costs no repeated copies; when gradients flow
    through the keys/values it concatenates instead, so backward works); a *static* cache (``static=True``,
    for cross-attention) is filled once from the encoder memory and then reused as it is.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0

    @property
    def empty(self) -> bool:
        return self.length == 0

    @property
    def keys(self) -> Tensor | None:
        return None if self._k is None else self._k[..., : self.length, :]

    @property
    def values(self) -> Tensor | None:
        return None if self._v is None else self._v[..., : self.length, :]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v`` (``[B, H, n, d]``) after what is cached; return all keys and values so far."""
        n = k.shape[-2]
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            # Autograd keeps earlier steps' keys/values for backward: never overwrite a buffer
            # in place then; concatenate into new tensors instead.
            self._k = k if self._k is None else torch.cat([self._k[..., : self.length, :], k], dim=-2)
            self._v = v if self._v is None else torch.cat([self._v[..., : self.length, :], v], dim=-2)
            self.length += n
            return self._k, self._v
        if self._k is None or self._v is None:
            capacity = max(2 * n, 16)
            self._k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
        elif self.length + n > self._k.shape[-2]:
            capacity = max(2 * self._k.shape[-2], self.length + n)
            self._k = _grow(self._k, self.length, capacity)
            self._v = _grow(self._v, self.length, capacity)
        end = self.length + n
        self._k[..., self.length : end, :] = k
        self._v[..., self.length : end, :] = v
        self.length = end
        return self._k[..., :end, :], self._v[..., :end, :]

    def set(self, k: Tensor, v: Tensor) -> None:
        """Fill a static cache (cross-attention keys/values of the encoder memory)."""
        self._k, self._v, self.length = k, v, k.shape[-2]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (e.g. the surviving beams in beam search)."""
        if self._k is not None and self._v is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)

    def merge(self, other: KVCache) -> None:
        """Add the rows of ``other`` after this cache's rows (continuous batching: a new sequence joins a
        running batch). The side with fewer positions is left-padded with zero keys/values, so the
        positions of every row stay right-aligned; those padding columns must be masked out (False in the
        key padding mask, True = real token). The merged cache has room to grow by as many positions again."""
        if self.static or other.static:
            raise ValueError("merge joins self-attention caches; static (cross-attention) caches cannot be merged")
        ok, ov = other.keys, other.values
        if ok is None or ov is None:
            return
        sk, sv = self.keys, self.values
        if sk is None or sv is None:
            sk, sv = ok[:0], ov[:0]
        if sk.shape[1] != ok.shape[1] or sk.shape[-1] != ok.shape[-1]:
            raise ValueError(f"cannot merge caches of shapes {tuple(sk.shape)} and {tuple(ok.shape)} (heads, head_dim)")
        length = max(self.length, other.length)
        capacity = max(2 * length, 16)
        rows = sk.shape[0]
        self._k = sk.new_zeros(rows + ok.shape[0], sk.shape[1], capacity, sk.shape[-1])
        self._v = sv.new_zeros(rows + ov.shape[0], sv.shape[1], capacity, sv.shape[-1])
        for buf, mine, theirs in ((self._k, sk, ok), (self._v, sv, ov)):
            buf[:rows, :, length - mine.shape[-2] : length] = mine
            buf[rows:, :, length - theirs.shape[-2] : length] = theirs
        self.length = length

    def drop_left(self, n: int) -> None:
        """Drop the first ``n`` cached positions of every row (leading all-padding columns, once longer rows left)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"drop_left({n}): the cache holds {self.length} positions")
        if n and self._k is not None and self._v is not None:
            self._k, self._v = self._k[..., n:, :], self._v[..., n:, :]
            self.length -= n


def _grow(buf: Tensor, length: int, capacity: int) -> Tensor:
    new = buf.new_empty(*buf.shape[:-2], capacity, buf.shape[-1])
    new[..., :length, :] = buf[..., :length, :]
    return new


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``Attention(x Wq, m Wk, m Wv)`` per head, concatenated, times ``Wo``.

    Self-attention (``memory=None``) computes queries, keys and values with one fused
    projection; cross-attention takes keys and values from ``memory`` (any length).

    Args:
        embed_dim: model width ``D`` of the queries' input and of the output.
        num_heads: number of (query) heads ``H``.
        head_dim: width of each head; defaults to ``embed_dim // num_heads``. "Wide" heads
            (each of the full width) are ``head_dim=embed_dim``.
        num_kv_heads: key/value heads (grouped-query attention): ``None`` = ``num_heads`` (multi-head),
            ``1`` = multi-query; must divide ``num_heads``. Key/value head ``j`` serves query heads
            ``j * H/Hkv .. (j + 1) * H/Hkv - 1`` (Hugging Face's ``repeat_kv``). A :class:`KVCache`
            stores only the ``num_kv_heads`` heads.
        kdim, vdim: feature sizes of the memory used for keys / values (default ``embed_dim``).
        bias: use biases in the projections.
        qkv_bias: biases in the query/key/value projections only (``None`` = follow ``bias``; Qwen2
            has ``qkv_bias=True, bias=False``).
        dropout: dropout on the attention weights (training only).
        rotary: a :class:`RotaryEmbedding` applied to queries and keys in self-attention.
        q_norm, k_norm: norms over ``head_dim`` applied to each head of the queries / keys (newly
            computed ones) before the rotary embedding (a per-head RMSNorm: QK-norm); ``None``: none.
        scale: the scores' scale (``None`` = ``head_dim ** -0.5``; Gemma: ``query_pre_attn_scalar ** -0.5``).

    Parameters: ``in_proj`` (``embed_dim`` -> ``(H + 2 Hkv) * head_dim``: the rows of ``Wq``, then ``Wk``,
    then ``Wv``, heads contiguous inside each) when ``kdim == vdim == embed_dim``, else ``q_proj``,
    ``k_proj``, ``v_proj``; and ``out_proj``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        num_kv_heads: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        qkv_bias: bool | None = None,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim} and {num_heads}")
        if head_dim is None:
            if embed_dim % num_heads != 0:
                divisors = [h for h in range(1, embed_dim + 1) if embed_dim % h == 0]
                raise ValueError(
                    f"num_heads ({num_heads}) must divide embed_dim ({embed_dim}); choose num_heads in "
                    f"{divisors[:12]}{'...' if len(divisors) > 12 else ''}, or set head_dim explicitly"
                )
            head_dim = embed_dim // num_heads
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            options = [h for h in range(1, num_heads + 1) if num_heads % h == 0]
            raise ValueError(
                f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads}); choose one of {options} "
                "(1 = multi-query, num_heads = multi-head)"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if scale is not None and not scale > 0:
            raise ValueError(f"scale must be positive (or None: head_dim ** -0.5), got {scale}")
        if rotary is not None and rotary.dim != head_dim:
            raise ValueError(f"rotary embedding has dim {rotary.dim}; it must equal head_dim ({head_dim})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self.rotary = rotary
        self.q_norm = q_norm
        self.k_norm = k_norm
        self.scale = scale
        self.hook_q, self.hook_k, self.hook_v, self.hook_z = HookPoint(), HookPoint(), HookPoint(), HookPoint()
        self.hook_rot_q, self.hook_rot_k, self.hook_attn_scores, self.hook_pattern = (HookPoint() for _ in range(4))
        inner = num_heads * head_dim
        kv_inner = num_kv_heads * head_dim
        self._sizes = [inner, kv_inner, kv_inner]
        in_bias = bias if qkv_bias is None else qkv_bias
        self._same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        if self._same_dims:
            self.in_proj = nn.Linear(embed_dim, inner + 2 * kv_inner, bias=in_bias)
        else:
            self.q_proj = nn.Linear(embed_dim, inner, bias=in_bias)
            self.k_proj = nn.Linear(self.kdim, kv_inner, bias=in_bias)
            self.v_proj = nn.Linear(self.vdim, kv_inner, bias=in_bias)
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights (each of Wq, Wk, Wv, Wo on its own), zero biases."""
        if self._same_dims:
            for chunk in self.in_proj.weight.data.split(self._sizes, dim=0):
                nn.init.xavier_uniform_(chunk)
            projections = [self.in_proj]
        else:
            projections = [self.q_proj, self.k_proj, self.v_proj]
            for proj in projections:
                nn.init.xavier_uniform_(proj.weight)
        for proj in projections:
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        prepared: PreparedAttention | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` to itself, or to ``memory`` (cross-attention).

        Args:
            x: queries' input ``[B, Tq, embed_dim]``.
            memory: keys'/values' input ``[B, Tk, kdim]``; ``None`` for self-attention.
            attn_mask: True = may attend; ``[Tq, Tk]``, ``[B, Tq, Tk]`` or ``[B, H, Tq, Tk]``.
            key_padding_mask: True = real key, False = padding; ``[B, Tk]`` (``Tk`` counts cached positions too).
            is_causal: causal self-attention (bottom-right aligned when a cache holds the past).
            need_weights: return the attention weights ``[B, H, Tq, Tk]``.
            cache: a :class:`KVCache`; self-attention appends the new keys/values to it, a static
                cache (cross-attention) is filled on the first call and reused afterwards.
            prepared: masks already validated and merged by the stack (:func:`attnkit.nn.masks.prepare_attention`),
                instead of ``attn_mask``, ``key_padding_mask`` and ``is_causal``; its ``rope`` (if any) replaces
                the rotary embedding's own positions.

        Returns:
            ``(out [B, Tq, embed_dim], weights [B, H, Tq, Tk] or None)``.
        """
        if prepared is not None and (attn_mask is not None or key_padding_mask is not None or is_causal):
            raise ValueError("pass either `prepared` or attn_mask/key_padding_mask/is_causal, not both")
        _check_input(x, self.embed_dim, "x")
        batch, q_len, _ = x.shape
        reuse_static = cache is not None and cache.static and not cache.empty

        if memory is None and not reuse_static:
            if cache is not None and cache.static:
                raise ValueError("a static (cross-attention) KVCache needs `memory` on its first call")
            if not self._same_dims:
                raise ValueError("this MultiHeadAttention has kdim/vdim != embed_dim: pass `memory` (cross-attention)")
            q, k, v = self._split_qkv(self.in_proj(x), batch, q_len)
        else:
            if self._same_dims:
                inner = self._sizes[0]
                kv_size = self._sizes[1] + self._sizes[2]
                w_q, w_kv = self.in_proj.weight.split([inner, kv_size])
                b_q, b_kv = (None, None) if self.in_proj.bias is None else self.in_proj.bias.split([inner, kv_size])
                q = self._heads(F.linear(x, w_q, b_q), batch, q_len, self.num_heads)
            else:
                q = self._heads(self.q_proj(x), batch, q_len, self.num_heads)
            if reuse_static:
                assert cache is not None
                cached_k, cached_v = cache.keys, cache.values
                assert cached_k is not None and cached_v is not None  # a filled static cache
                k, v = cached_k, cached_v
            else:
                assert memory is not None
                _check_input(memory, self.kdim, "memory")
                if memory.shape[0] != batch:
                    raise ValueError(
                        f"memory has batch size {memory.shape[0]} (shape {tuple(memory.shape)}) but x has {batch} "
                        f"(shape {tuple(x.shape)}); they must match"
                    )
                m_len = memory.shape[1]
                if self._same_dims:
                    kv = F.linear(memory, w_kv, b_kv).view(batch, m_len, 2, self.num_kv_heads, self.head_dim)
                    k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
                else:
                    if self.kdim != self.vdim:
                        raise ValueError("kdim != vdim: pass keys and values through `memory` of one feature size")
                    k = self._heads(self.k_proj(memory), batch, m_len, self.num_kv_heads)
                    v = self._heads(self.v_proj(memory), batch, m_len, self.num_kv_heads)

        q = through_heads(self.hook_q, q)  # hooks see [B, T, H, hd]; a reused static cache holds hooked keys
        k, v = (k, v) if reuse_static else (through_heads(self.hook_k, k), through_heads(self.hook_v, v))
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None and not reuse_static:  # (a reused static cache holds normed keys)
            k = self.k_norm(k)
        is_self = memory is None and not reuse_static
        if is_self and prepared is not None and prepared.rope is not None:
            cos, sin = prepared.rope
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        elif self.rotary is not None and is_self:
            offset = cache.length if cache is not None else 0
            q = self.rotary(q, offset=offset)
            k = self.rotary(k, offset=offset)
        if is_self and self.rotary is not None:  # (a stack's prepared rope comes with its rotary embedding)
            q, k = through_heads(self.hook_rot_q, q), through_heads(self.hook_rot_k, k)
        if cache is not None:
            if cache.static:
                if not reuse_static:
                    cache.set(k, v)
            else:
                k, v = cache.append(k, v)

        if prepared is None:
            k_len = k.shape[-2]
            mask = expand_attention_mask(
                attn_mask, key_padding_mask, batch=batch, q_len=q_len, k_len=k_len, num_heads=self.num_heads
            )
            if is_causal and q_len > k_len:
                raise ValueError(
                    f"is_causal: q_len ({q_len}) must not exceed k_len ({k_len}) (queries are the last keys)"
                )
            prepared = finalize_mask(
                mask,
                q_len=q_len,
                k_len=k_len,
                is_causal=is_causal,
                need_weights=need_weights,
                dtype=q.dtype,
                device=q.device,
            )
        p, hooks = (self.dropout if self.training else 0.0), (self.hook_attn_scores, self.hook_pattern)
        out, weights = attend(q, k, v, prepared, dropout_p=p, need_weights=need_weights, scale=self.scale, hooks=hooks)
        out = self.hook_z(out.transpose(1, 2)).reshape(batch, q_len, self._sizes[0])
        return self.out_proj(out), weights

    def _heads(self, projected: Tensor, batch: int, length: int, heads: int) -> Tensor:
        """``[B, T, heads * hd]`` -> ``[B, heads, T, hd]``."""
        return projected.view(batch, length, heads, self.head_dim).transpose(1, 2)

    def _split_qkv(self, projected: Tensor, batch: int, length: int) -> tuple[Tensor, Tensor, Tensor]:
        """The fused projection ``[B, T, (H + 2 Hkv) * hd]`` -> q ``[B, H, T, hd]``, k and v ``[B, Hkv, T, hd]``."""
        if self.num_kv_heads == self.num_heads:  # one view and permute for all three
            q, k, v = projected.view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            return q, k, v
        q, k, v = projected.split(self._sizes, dim=-1)
        return (
            self._heads(q, batch, length, self.num_heads),
            self._heads(k, batch, length, self.num_kv_heads),
            self._heads(v, batch, length, self.num_kv_heads),
        )


def _check_input(x: Tensor, width: int, name: str) -> None:
    if x.dim() != 3:
        raise ValueError(f"{name} must be [batch, seq, features], got shape {tuple(x.shape)}")
    if x.shape[-1] != width:
        raise ValueError(f"{name} has {x.shape[-1]} features (shape {tuple(x.shape)}), expected {width}")
