"""Attention masks.

Every boolean mask in attnkit means **True = may attend** (the convention of
:func:`torch.nn.functional.scaled_dot_product_attention`). ``torch.nn`` modules use the
opposite convention for their boolean masks: pass ``~mask`` when handing one to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PreparedAttention",
    "alibi_bias",
    "band_mask",
    "causal_mask",
    "check_bool_mask",
    "combine_masks",
    "document_mask",
    "document_positions",
    "expand_attention_mask",
    "finalize_mask",
    "masked_fill_value",
    "padding_mask",
    "padding_mask_from_ids",
    "positions_from_padding_mask",
    "prepare_attention",
]


def masked_fill_value(dtype: torch.dtype) -> float:
    """The logit given to masked positions: the dtype's lowest finite value.

    A large negative literal (minus a billion, say) overflows to ``-inf`` in half precision;
    the lowest finite value never does, so softmax stays finite.
    """
    return torch.finfo(dtype).min


def causal_mask(q_len: int, k_len: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Causal mask ``[q_len, k_len]``, True = may attend.

    Aligned to the bottom right: query ``i`` is the ``(k_len - q_len + i)``-th position, so it
    may attend to keys ``0 .. k_len - q_len + i``. With ``q_len == k_len`` this is the usual lower
    triangle; with a key/value cache (``k_len > q_len``) the new queries see the whole past.
    """
    k_len = q_len if k_len is None else k_len
    if q_len > k_len:
        raise ValueError(f"causal_mask: q_len ({q_len}) must not exceed k_len ({k_len})")
    return band_mask(q_len, k_len, causal=True, window=None, device=device)


def band_mask(
    q_len: int, k_len: int, *, causal: bool, window: int | None, device: torch.device | str | None = None
) -> Tensor:
    """Causal and/or sliding-window mask ``[q_len, k_len]``, True = may attend, bottom-right aligned.

    Query ``i`` is at position ``p = k_len - q_len + i``. ``causal``: keys ``<= p``. ``window``: keys
    ``j`` with ``p - j < window`` (causal: the last ``window`` keys including itself, as Mistral;
    otherwise ``|p - j| < window``).
    """
    if q_len > k_len:
        raise ValueError(f"band_mask: q_len ({q_len}) must not exceed k_len ({k_len})")
    q_pos = torch.arange(k_len - q_len, k_len, device=device).unsqueeze(1)
    k_pos = torch.arange(k_len, device=device).unsqueeze(0)
    distance = q_pos - k_pos
    mask = distance >= 0 if causal else torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if window is not None:
        mask &= (distance if causal else distance.abs()) < window
    return mask


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Key-padding mask ``[B, max_len]`` from sequence lengths ``[B]``: True at real positions."""
    if lengths.dim() != 1:
        raise ValueError(f"padding_mask: lengths must be 1-D [batch], got shape {tuple(lengths.shape)}")
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def padding_mask_from_ids(ids: Tensor, pad_id: int) -> Tensor:
    """Key-padding mask ``[B, T]`` from token ids ``[B, T]``: True where the token is not ``pad_id``."""
    return ids != pad_id


def positions_from_padding_mask(padding_mask: Tensor) -> Tensor:
    """Position ids ``[B, T]`` from a padding mask ``[B, T]`` (True = real token): each token's position is
    the number of real tokens before it in its row (left padding: the row's positions are those of the
    unpadded row; padding gets position 0)."""
    return (padding_mask.long().cumsum(-1) - 1).clamp_(min=0)


def document_mask(document_ids: Tensor) -> Tensor:
    """Block-diagonal mask ``[B, T, T]`` of packed rows, True = may attend: a token attends only to tokens
    of its own document. ``document_ids [B, T]`` number each row's documents (equal ids are one document;
    each document's tokens are contiguous). Combine with the causal mask for a decoder."""
    if document_ids.dim() != 2:
        raise ValueError(f"document_ids must be [B, T], got shape {tuple(document_ids.shape)}")
    return document_ids[:, :, None] == document_ids[:, None, :]


def document_positions(document_ids: Tensor) -> Tensor:
    """Position ids ``[B, T]`` restarting at 0 where each document of a packed row starts (``document_ids
    [B, T]`` as :func:`document_mask`)."""
    if document_ids.dim() != 2:
        raise ValueError(f"document_ids must be [B, T], got shape {tuple(document_ids.shape)}")
    index = torch.arange(document_ids.shape[1], device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values
    return index - first


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of broadcastable boolean masks (True = may attend); ``None`` entries are skipped."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        check_bool_mask(m, "mask")
        out = m if out is None else out & m
    return out


def check_bool_mask(mask: Tensor, name: str) -> None:
    """A ``TypeError`` unless ``mask`` (named ``name`` in the message) is boolean, True = may attend."""
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            f"convert with `{name}.bool()`, or for a torch.nn-style mask (True = blocked) pass `~{name}`"
        )


def expand_attention_mask(
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    *,
    batch: int,
    q_len: int,
    k_len: int,
    num_heads: int | None = None,
    names: tuple[str, str] = ("attn_mask", "key_padding_mask"),
) -> Tensor | None:
    """Validate masks and merge them into one boolean mask broadcastable to ``[B, H, Tq, Tk]``.

    Args:
        attn_mask: True = may attend; ``[Tq, Tk]``, ``[B, Tq, Tk]`` or ``[B, H, Tq, Tk]``
            (size-1 dims broadcast).
        key_padding_mask: True = real key, False = padding; ``[B, Tk]``.
        names: what the caller calls the two masks, for error messages.
    Returns:
        A 4-D boolean mask (possibly with size-1 dims) or ``None`` when both are ``None``.
    """
    expected_heads = "H" if num_heads is None else str(num_heads)
    out: Tensor | None = None
    if attn_mask is not None:
        check_bool_mask(attn_mask, names[0])
        if attn_mask.dim() == 2:
            m = attn_mask[None, None]
        elif attn_mask.dim() == 3:
            m = attn_mask[:, None]
        elif attn_mask.dim() == 4:
            m = attn_mask
        else:
            m = None
        ok = m is not None and _broadcastable(m.shape, (batch, num_heads, q_len, k_len))
        if not ok:
            raise ValueError(
                f"{names[0]} has shape {tuple(attn_mask.shape)}; expected [Tq, Tk]=[{q_len}, {k_len}], "
                f"[B, Tq, Tk]=[{batch}, {q_len}, {k_len}] or [B, H, Tq, Tk]=[{batch}, {expected_heads}, "
                f"{q_len}, {k_len}] (True = may attend)"
            )
        out = m
    if key_padding_mask is not None:
        check_bool_mask(key_padding_mask, names[1])
        if key_padding_mask.dim() != 2 or not _broadcastable(key_padding_mask.shape, (batch, k_len)):
            raise ValueError(
                f"{names[1]} has shape {tuple(key_padding_mask.shape)}; expected [B, Tk]=[{batch}, {k_len}] "
                "(True = real token, False = padding)"
            )
        kpm = key_padding_mask[:, None, None, :]
        out = kpm if out is None else out & kpm
    return out


def _broadcastable(shape: tuple[int, ...] | torch.Size, target: tuple[int | None, ...]) -> bool:
    if len(shape) != len(target):
        return False
    return all(s == 1 or t is None or s == t for s, t in zip(shape, target))


@dataclass
class PreparedAttention:
    """Everything an attention layer needs about masking, computed once per stack (not per layer).

    Attributes:
        mask: ``None``, a boolean mask (True = may attend) or an additive float mask (0 = may attend,
            the dtype's lowest value = masked, plus e.g. ALiBi biases), broadcastable to
            ``[B, H, Tq, Tk]``. Rows with no key to attend to have been opened (see ``has_key``).
        is_causal: let the fused kernel apply its own causal mask (only when ``mask`` is ``None`` and
            ``Tq == Tk``).
        has_key: ``[B, 1|H, Tq, 1]`` False on query rows whose every key was masked: their outputs
            (and weights) are zeroed; ``None`` when every row has a key.
        rope: rotary ``(cos, sin)`` of the new positions (``[T, hd]`` or ``[B, 1, T, hd]``), for
            self-attention; ``None`` otherwise.
    """

    mask: Tensor | None = None
    is_causal: bool = False
    has_key: Tensor | None = None
    rope: tuple[Tensor, Tensor] | None = None


def finalize_mask(
    mask: Tensor | None,
    *,
    q_len: int,
    k_len: int,
    is_causal: bool = False,
    window: int | None = None,
    bias: Tensor | None = None,
    need_weights: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> PreparedAttention:
    """Turn a validated boolean mask (True = may attend) and the causal / sliding-window / bias options
    into a :class:`PreparedAttention`. The one place that decides how causality is applied:

    * nothing else to mask, ``Tq == Tk`` and no weights wanted: the fused kernel's own causal mask;
    * one query (cached decoding, no window): nothing, it may attend to every key;
    * otherwise an explicit bottom-right-aligned (band) mask, combined with ``mask``.

    ``bias`` (float, broadcastable to ``[B, H, Tq, Tk]``, e.g. ALiBi) makes the result additive.
    """
    user_mask = mask is not None
    fused = False
    if is_causal or window is not None:
        if mask is None and bias is None and window is None and q_len == k_len and not need_weights:
            fused = True
        elif not (is_causal and window is None and q_len == 1):
            mask = combine_masks(mask, band_mask(q_len, k_len, causal=is_causal, window=window, device=device))
    has_key: Tensor | None = None
    if user_mask:
        # A fully masked query row would give softmax(-inf...) = NaN. Let such rows attend everywhere
        # (a harmless, finite computation) and zero their outputs afterwards. The causal and window
        # masks alone never empty a row, so only a caller's mask needs this.
        assert mask is not None
        row_has_key = mask.any(dim=-1, keepdim=True)
        if not bool(row_has_key.all()):
            has_key = row_has_key
            mask = mask | ~row_has_key
    if bias is not None:
        additive = bias.to(dtype)
        if mask is not None:
            additive = additive.masked_fill(~mask, masked_fill_value(dtype))
        mask = additive
    return PreparedAttention(mask=mask, is_causal=fused, has_key=has_key)


def alibi_bias(slopes: Tensor, q_len: int, k_len: int, *, device: torch.device | str | None = None) -> Tensor:
    """ALiBi's ``-slope_h * |query position - key position|``, ``[1, H, Tq, Tk]``, for the last ``Tq`` of
    ``Tk`` positions (positions are column indices)."""
    q_pos = torch.arange(k_len - q_len, k_len, device=device).unsqueeze(1)
    k_pos = torch.arange(k_len, device=device).unsqueeze(0)
    distance = (q_pos - k_pos).abs().to(slopes.dtype)
    return -slopes.to(device)[None, :, None, None] * distance  # [1, H, Tq, Tk]


def prepare_attention(
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    *,
    batch: int,
    q_len: int,
    k_len: int,
    num_heads: int | None = None,
    is_causal: bool = False,
    window: int | None = None,
    alibi_slopes: Tensor | None = None,
    bias: Tensor | None = None,
    need_weights: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    names: tuple[str, str] = ("attn_mask", "key_padding_mask"),
) -> PreparedAttention:
    """Validate and merge a stack's masks once: :func:`expand_attention_mask`, then :func:`finalize_mask`.

    Args:
        attn_mask: True = may attend; ``[Tq, Tk]``, ``[B, Tq, Tk]`` or ``[B, H, Tq, Tk]``.
        key_padding_mask: ``[B, Tk]``, True = real token, False = padding.
        is_causal: causal attention, bottom-right aligned (queries are the last ``Tq`` of ``Tk`` positions).
        window: sliding window (each query attends to at most the last ``window`` keys, itself included).
        alibi_slopes: ``[H]``: add ``-slope * |query position - key position|`` to the scores (ALiBi;
            positions are column indices, so left padding does not change the distances).
        bias: a float bias broadcastable to ``[B, H, Tq, Tk]`` added to the scores (a positional
            encoding's :meth:`attnkit.nn.PositionalEncoding.attention_bias`).
        need_weights: the layers will return attention weights (no fused causal kernel then).
        names: what the caller calls the two masks, for error messages.
    """
    if window is not None and window < 1:
        raise ValueError(f"sliding window must be >= 1, got {window}")
    mask = expand_attention_mask(
        attn_mask, key_padding_mask, batch=batch, q_len=q_len, k_len=k_len, num_heads=num_heads, names=names
    )
    if alibi_slopes is not None:
        alibi = alibi_bias(alibi_slopes, q_len, k_len, device=device)
        bias = alibi if bias is None else bias + alibi
    return finalize_mask(
        mask,
        q_len=q_len,
        k_len=k_len,
        is_causal=is_causal,
        window=window,
        bias=bias,
        need_weights=need_weights,
        dtype=dtype,
        device=device,
    )
