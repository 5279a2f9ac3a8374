"""What the serving engine tells a request: its :data:`Event` s, and the log-probabilities they carry.

:class:`~attnkit.serve.engine.Engine` calls a request's ``sink`` with, in order: a :class:`Prompt` (only when the
request asked for its prompt's log-probabilities), then, per choice, :class:`Piece` s of text and one
:class:`Finished`; or a single :class:`Failed` that ends the request (every choice).

Log-probabilities are the model's own: the log-softmax of its logits (float32), before any sampling option
changes them, as OpenAI and vLLM report them. A choice's Pieces carry the entries of its tokens in order; their
concatenation is its ``Finished.logprobs``: one entry per id of ``Finished.ids``, then one for the stop id that
ended the choice, if one did (OpenAI and vLLM report it; lm-eval's ``local-completions`` scores with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.models.generation import Choice, SamplingParams

__all__ = ["Event", "Failed", "Finished", "Piece", "Prompt", "TokenLogprob", "choice_logprobs", "prompt_logprobs"]


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability: ``id``, its ``logprob`` under the model (raw log-softmax) and ``top``, the
    ``k`` most likely tokens at its position as ``(id, logprob)`` pairs, most likely first (``k`` the request's
    ``SamplingParams.logprobs``)."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Prompt:
    """The log-probabilities of the prompt's tokens (a request submitted with ``prompt_logprobs``), sent before
    anything else: one per prompt token, the first ``None`` (nothing predicts it); ``top`` holds
    ``SamplingParams.logprobs`` alternatives (none if that is ``None``)."""

    logprobs: tuple[TokenLogprob | None, ...]


@dataclass(frozen=True)
class Piece:
    """New text of choice ``index`` (never past a stop string); with ``SamplingParams.logprobs`` set,
    ``logprobs`` holds the entries of the tokens accepted since this choice's previous Piece (a token whose
    text the stream decoder holds back rides with the next Piece; the last Piece may have no text)."""

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Finished:
    """Choice ``index`` ended: ``reason`` is ``"stop"`` (a stop id or string) or ``"length"``
    (``max_tokens`` or the context); ``tokens`` is how many tokens it generated (a stop id included),
    ``ids`` the ids of its text (without the stop id) and, with ``SamplingParams.logprobs`` set,
    ``logprobs`` one entry per id of ``ids``, then the stop id's if one ended it."""

    index: int
    reason: str
    tokens: int
    ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Failed:
    """The request failed inside the engine (the server answers 500); nothing more follows (for any of
    its choices)."""

    message: str


Event = Prompt | Piece | Finished | Failed


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
    """The :class:`Prompt` entries of ``prompt`` from the model's logits ``[len(prompt), V]`` at its positions,
    with ``k`` alternatives each."""
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
