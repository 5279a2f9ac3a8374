"""Attention masks.

Every boolean mask in attnkit means **True = may attend** (the convention of
:func:`torch.nn.functional.scaled_dot_product_attention`). ``torch.nn`` modules use the
opposite convention for their boolean masks: pass ``~mask`` when handing one to them.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "combine_masks",
    "expand_attention_mask",
    "masked_fill_value",
    "padding_mask",
    "padding_mask_from_ids",
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
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)


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


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of broadcastable boolean masks (True = may attend); ``None`` entries are skipped."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        _check_bool(m, "mask")
        out = m if out is None else out & m
    return out


def _check_bool(mask: Tensor, name: str) -> None:
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
        _check_bool(attn_mask, names[0])
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
        _check_bool(key_padding_mask, names[1])
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
