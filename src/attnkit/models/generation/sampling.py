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

import torch
from torch import Tensor

from attnkit.models.generation.options import check_sampling

__all__ = [
    "apply_repetition_penalty",
    "check_sampling",
    "left_pad",
    "min_p_filter",
    "sample_next_token",
    "top_k_filter",
    "top_p_filter",
]


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row ``[..., V]`` (ties at the k-th are all kept); the rest -> -inf."""
    if k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability sums to ``>= p``.

    The most likely token is always kept; the rest of each row ``[..., V]`` -> -inf.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = before >= p  # already p without this token: drop it (never the first one)
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Min-p filter (as transformers' ``MinPLogitsWarper``): drop tokens whose probability is below
    ``min_p`` times the row's top probability; the most likely token is always kept."""
    if min_p <= 0.0:
        return logits
    probs = logits.softmax(dim=-1)
    drop = probs < min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(drop, float("-inf"))


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """Penalise the tokens already in each row (transformers' ``RepetitionPenaltyLogitsProcessor``):
    where ``seen [B, V]`` is True, positive logits are divided by ``penalty``, negative ones multiplied."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


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
    """One token id per row from ``logits [B, V]`` -> ``[B]`` int64.

    ``temperature == 0`` is greedy (argmax; the lowest id among equal maxima) and ignores
    ``top_k``/``top_p``/``min_p``. Otherwise the logits are divided by ``temperature``, filtered by
    ``top_k``, ``top_p`` then ``min_p`` (transformers' order), and a token is drawn from their softmax
    with ``generator`` (seed it for reproducible samples).
    """
    check_sampling(temperature, top_k, top_p, min_p)
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)
    if min_p is not None:
        scaled = min_p_filter(scaled, min_p)
    probs = scaled.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
