"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling.

Shared by every generating model (the decoder-only language model, the translator). Logits are
``[B, V]`` (the last position of each row); the result is one token id per row, ``[B]`` int64.
Filtered-out tokens get ``-inf`` logits, so their probability is exactly 0; the filters always
keep at least one token per row, so a row is never all ``-inf``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_sampling", "sample_next_token", "top_k_filter", "top_p_filter"]


def check_sampling(temperature: float, top_k: int | None = None, top_p: float | None = None) -> None:
    """Raise a clear ``ValueError`` for a temperature < 0, a ``top_k`` < 1 or a ``top_p`` outside (0, 1]."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature >= 0.0:
        raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


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


def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token id per row from ``logits [B, V]`` -> ``[B]`` int64.

    ``temperature == 0`` is greedy (argmax; the lowest id among equal maxima) and ignores
    ``top_k``/``top_p``. Otherwise the logits are divided by ``temperature``, filtered by ``top_k``
    then ``top_p``, and a token is drawn from their softmax with ``generator`` (seed it for
    reproducible samples).
    """
    check_sampling(temperature, top_k, top_p)
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)
    probs = scaled.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
