"""Log-probabilities as the decoder reports them: one :class:`TokenLogprob` per token.

They are the model's own: the log-softmax of its logits (float32), before any sampling option changes them, as
OpenAI and vLLM report them. :func:`choice_logprobs` reads them off a :class:`~attnkit.models.generation.Choice`
(a batched step's choice), :func:`prompt_logprobs` off the logits of a prompt's positions (echo).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.models.generation.params import SamplingParams
from attnkit.models.generation.processors import Choice

__all__ = ["TokenLogprob", "choice_logprobs", "prompt_logprobs"]


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability: ``id``, its ``logprob`` under the model (raw log-softmax) and ``top``, the
    ``k`` most likely tokens at its position as ``(id, logprob)`` pairs, most likely first (``k`` the request's
    ``SamplingParams.logprobs``)."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def choice_logprobs(choice: Choice, params: Sequence[SamplingParams]) -> list[TokenLogprob | None] | None:
    """Each row's :class:`TokenLogprob` of a :class:`~attnkit.models.generation.Choice` (``None`` for a row
    whose ``params`` ask none; ``None`` overall when no row asked)."""
    if choice.logprobs is None:
        return None
    tokens, chosen = choice.tokens.tolist(), choice.logprobs.tolist()
    ids = [] if choice.top_ids is None else choice.top_ids.tolist()
    lps = [] if choice.top_logprobs is None else choice.top_logprobs.tolist()
    out: list[TokenLogprob | None] = []
    for row, p in enumerate(params):
        k = p.logprobs
        if k is None:
            out.append(None)
        else:
            top = tuple(zip(ids[row][:k], lps[row][:k])) if k else ()
            out.append(TokenLogprob(tokens[row], chosen[row], top))
    return out


def prompt_logprobs(logits: Tensor, prompt: Sequence[int], k: int) -> tuple[TokenLogprob | None, ...]:
    """The entries of ``prompt`` from the model's logits ``[len(prompt), V]`` at its positions, with ``k``
    alternatives each: one per prompt token, the first ``None`` (nothing predicts it)."""
    scores = logits[:-1].float().log_softmax(dim=-1)
    targets = torch.tensor(list(prompt[1:]), dtype=torch.long, device=scores.device)
    chosen = scores.gather(-1, targets[:, None]).squeeze(-1).tolist()
    top_ids: list[list[int]] = [[] for _ in chosen]
    top_lps: list[list[float]] = [[] for _ in chosen]
    if k and chosen:
        values, index = scores.topk(min(k, scores.shape[-1]), dim=-1)
        top_ids, top_lps = index.tolist(), values.tolist()
    entries = (
        TokenLogprob(int(token), lp, tuple(zip(ids, lps)))
        for token, lp, ids, lps in zip(prompt[1:], chosen, top_ids, top_lps)
    )
    return (None, *entries)
