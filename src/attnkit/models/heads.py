"""Head scores of a decoder-only :class:`LanguageModel`: previous-token, duplicate-token and induction heads.

As TransformerLens' tutorials define them, from the attention patterns (``blocks.{l}.attn.hook_pattern``) on
sequences of a BOS and random tokens repeated once (:func:`repeated_tokens`, seeded), ``[BOS, r_1 .. r_n,
r_1 .. r_n]``:

* previous-token score: the mean attention of every position to the one before it (``diagonal(-1)``);
* duplicate-token score: the mean attention of each second-half position to the earlier copy of its own token
  (``diagonal(-n)``);
* induction score: the mean attention of each second-half position to the token *after* its earlier copy, the one
  that came next last time (``diagonal(1 - n)``).

Each is in [0, 1]: 1 is a head that always attends there and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.models.lm import LanguageModel
from attnkit.nn.hooks import run_with_cache

__all__ = ["HeadScores", "head_scores", "repeated_tokens"]


def repeated_tokens(
    vocab_size: int, length: int, batch: int = 4, *, seed: int = 0, bos: int | None = None, avoid: tuple[int, ...] = ()
) -> Tensor:
    """``[batch, 1 + 2 * length]`` (``[batch, 2 * length]`` without ``bos``): ``length`` random tokens (uniform over
    the vocabulary less ``bos`` and ``avoid``, drawn with ``seed``; all different where the vocabulary allows), then
    the same ``length`` again."""
    if length < 2 or batch < 1:
        raise ValueError(f"repeated_tokens: length must be >= 2 and batch >= 1, got length={length}, batch={batch}")
    skip = {*avoid, *(() if bos is None else (bos,))}
    allowed = torch.tensor([t for t in range(vocab_size) if t not in skip])
    if len(allowed) < 2:
        raise ValueError(f"repeated_tokens: a vocabulary of {vocab_size} leaves fewer than 2 tokens to draw from")
    generator = torch.Generator().manual_seed(seed)
    if len(allowed) >= length:  # distinct within a half: each token's earlier copy is unique
        half = allowed[torch.rand(batch, len(allowed), generator=generator).argsort(dim=1)[:, :length]]
    else:
        half = allowed[torch.randint(len(allowed), (batch, length), generator=generator)]
    start = [] if bos is None else [torch.full((batch, 1), bos, dtype=torch.long)]
    return torch.cat([*start, half, half], dim=1)


@dataclass
class HeadScores:
    """``[L, H]`` scores per layer and head: ``previous_token``, ``duplicate_token``, ``induction``; ``tokens``: the
    repeated sequences they were measured on."""

    previous_token: Tensor
    duplicate_token: Tensor
    induction: Tensor
    tokens: Tensor


def scores_of(pattern: Tensor, length: int) -> tuple[Tensor, Tensor, Tensor]:
    """Previous-token, duplicate-token and induction scores ``[H]`` of one layer's pattern ``[B, H, T, T]`` on
    sequences whose last ``2 * length`` tokens are ``length`` tokens repeated."""

    def stripe(offset: int) -> Tensor:
        return pattern.diagonal(offset=offset, dim1=-2, dim2=-1).float().mean(dim=(0, -1))

    return stripe(-1), stripe(-length), stripe(1 - length)


@torch.no_grad()
def head_scores(model: nn.Module, *, length: int = 20, batch: int = 4, seed: int = 0) -> HeadScores:
    """The three scores of every head of ``model``, from its patterns on :func:`repeated_tokens` (``length`` random
    tokens after the model's BOS, repeated; ``batch`` sequences; ``seed``)."""
    if not isinstance(model, LanguageModel):
        raise TypeError(
            f"head scores read a decoder-only LanguageModel (lm runs, imported GPT-2/Llama models), got "
            f"{type(model).__name__}"
        )
    config = model.config
    if 1 + 2 * length > config.max_len:
        raise ValueError(
            f"length {length}: 1 + 2 * length tokens exceed the model's context of {config.max_len}; use a length "
            f"<= {(config.max_len - 1) // 2}"
        )
    device = next(model.parameters()).device
    tokens = repeated_tokens(
        config.vocab_size, length, batch, seed=seed, bos=config.bos_id, avoid=(config.pad_id, config.eos_id)
    ).to(device)
    cache = run_with_cache(model, tokens, names="blocks.*.attn.hook_pattern")
    rows = [scores_of(cache[f"blocks.{i}.attn.hook_pattern"], length) for i in range(len(model.decoder.layers))]
    prev, dup, ind = (torch.stack([row[k] for row in rows]).cpu() for k in range(3))
    return HeadScores(previous_token=prev, duplicate_token=dup, induction=ind, tokens=tokens.cpu())
