"""Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus) and min-p sampling,
repetition penalty; left-padding a batch of prompts of different lengths.

Used by :func:`attnkit.models.generation.sample` (the language model's sampling loop). Logits are
``[B, V]`` (the last position of each row); the result is one token id per row, ``[B]`` int64.
Filtered-out tokens get ``-inf`` logits, so their probability is exactly 0; the filters always
keep at least one token per row, so a row is never all ``-inf``. The options are checked by
:func:`~attnkit.models.generation.options.check_sampling` (re-exported here), the check every entry point shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnkit.models.generation.options import check_sampling
from attnkit.models.generation.params import SamplingParams
from attnkit.models.generation.processors import Sampler, min_p_rows, repetition_rows, top_k_rows, top_p_rows

__all__ = [
    "apply_repetition_penalty",
    "check_sampling",
    "left_pad",
    "min_p_filter",
    "sample_next_token",
    "top_k_filter",
    "top_p_filter",
]


def _rows(logits: Tensor, value: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """``value`` for every row of ``logits [..., V]`` (flattened to rows): the per-row filters' argument."""
    return torch.full(logits.shape[:-1], value, dtype=dtype, device=logits.device).reshape(-1)


def _per_row(fn: Any, logits: Tensor, value: Tensor) -> Tensor:
    flat = logits.reshape(-1, logits.shape[-1])
    return fn(flat, value).reshape(logits.shape)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row ``[..., V]`` (ties at the k-th are all kept); the rest -> -inf
    (:func:`~attnkit.models.generation.processors.top_k_rows` with one ``k`` for every row)."""
    if k >= logits.shape[-1]:
        return logits
    return _per_row(top_k_rows, logits, _rows(logits, k, torch.long))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability sums to ``>= p``.

    The most likely token is always kept; the rest of each row ``[..., V]`` -> -inf
    (:func:`~attnkit.models.generation.processors.top_p_rows` with one ``p`` for every row).
    """
    if p >= 1.0:
        return logits
    return _per_row(top_p_rows, logits, _rows(logits, p))


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Min-p filter (as transformers' ``MinPLogitsWarper``): drop tokens whose probability is below
    ``min_p`` times the row's top probability; the most likely token is always kept."""
    if min_p <= 0.0:
        return logits
    return _per_row(min_p_rows, logits, _rows(logits, min_p))


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """Penalise the tokens already in each row (transformers' ``RepetitionPenaltyLogitsProcessor``):
    where ``seen [B, V]`` is True, positive logits are divided by ``penalty``, negative ones multiplied."""
    if penalty == 1.0:
        return logits
    return repetition_rows(logits, seen, _rows(logits[..., :1], penalty).to(logits.dtype))


def left_pad(sequences: Sequence[Sequence[int] | Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Left-pad token sequences of different lengths -> ``(ids [B, T], padding_mask [B, T])``,
    ``T`` the longest length; the mask is True at real tokens."""
    rows = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if not rows:
        raise ValueError("no sequences to pad: pass at least one prompt")
    empty = [i for i, r in enumerate(rows) if r.numel() == 0]
    if empty:
        raise ValueError(f"prompt(s) {empty} are empty: start each prompt with bos_id")
    length = max(r.numel() for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, length - r.numel() :] = r
        mask[i, length - r.numel() :] = True
    return ids, mask


def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token id per row from ``logits [B, V]`` -> ``[B]`` int64, every row with the same options.

    ``temperature == 0`` is greedy (argmax; the lowest id among equal maxima) and ignores
    ``top_k``/``top_p``/``min_p``. Otherwise the logits are divided by ``temperature``, filtered by
    ``top_k``, ``top_p`` then ``min_p`` (transformers' order), and a token is drawn from their softmax
    with ``generator`` (seed it for reproducible samples). The choice is the :class:`Sampler`'s, the one
    every entry point uses.
    """
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    sampler = Sampler(logits.shape[-1], logits.device)
    sampler.add(params, torch.zeros(logits.shape[0], 0, dtype=torch.long, device=logits.device), generator=generator)
    return sampler.choose(logits).tokens
