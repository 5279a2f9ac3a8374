"""The prefill of a continuous batch's new rows: one forward pass over the prompts of newly admitted requests
(or, for a prompt that starts with a cached prefix, over the rest of it), giving the keys and values and first
logits that join the batch (:class:`~attnkit.models.generation.batch.ContinuousBatch`).

Also the two protocols the batch is written against: :class:`BatchModel` (what it needs of a decoder-only model,
e.g. :class:`~attnkit.models.LanguageModel`) and :class:`BatchRequest` (what it reads of a request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from attnkit.models.generation.logprobs import TokenLogprob, prompt_logprobs
from attnkit.models.generation.params import SamplingParams
from attnkit.models.generation.prefix_cache import PrefixCache, PrefixHit
from attnkit.nn import DecoderCache

__all__ = ["BatchModel", "BatchRequest", "Prefill", "prefill"]


class BatchModel(Protocol):
    """A decoder-only model as the batch runs it (:class:`~attnkit.models.LanguageModel` is one): ``ids [B, T]``
    (with ``cache``: only the new positions), ``key_padding_mask [B, past + T]`` True at real tokens, ``only``
    ``[B, T]`` the positions whose logits are wanted -> logits (``[N, V]`` with ``only``, else ``[B, T, V]``)."""

    def __call__(
        self, ids: Tensor, key_padding_mask: Tensor | None = None, *, cache: DecoderCache | None = None,
        only: Tensor | None = None,
    ) -> Tensor: ...  # fmt: skip

    def new_cache(self) -> DecoderCache: ...


class BatchRequest(Protocol):
    """What the batch reads of a request: its ``prompt`` ids, its ``params`` (``n`` rows, each decoded with
    them), ``prompt_logprobs`` (score every prompt position: echo) and ``cancelled`` (its rows leave the batch)."""

    prompt: list[int]
    params: SamplingParams
    prompt_logprobs: bool
    cancelled: bool


Prefill = tuple[DecoderCache, Tensor, Tensor, list[tuple[TokenLogprob | None, ...] | None]]
"""``(cache, mask [rows, T] True = real token, last logits [rows, V], each request's prompt log-probabilities
or None)``, one row per choice."""


def prefill(
    model: BatchModel,
    requests: Sequence[BatchRequest],
    device: torch.device,
    prefix_cache: PrefixCache | None = None,
    hit: PrefixHit | None = None,
) -> Prefill:
    """One forward pass over the prompts of ``requests``, left-padded to the longest (positions count
    each row's own tokens; a request alone passes no mask; the logits of the last positions only, and of
    every position of a request that asked its prompt's log-probabilities) -> ``(cache, mask, last logits,
    prompt log-probabilities)``, one row per choice (the log-probabilities one per request: ``None`` unless it
    asked). With a prefix cache ``hit`` (one request), only the prompt past the cached prefix is run. Changes
    nothing of the batch; every prompt's blocks are kept in ``prefix_cache`` (an echo's too: the keys and values
    do not depend on which positions' logits are computed)."""
    if hit is not None:
        if prefix_cache is None:
            raise ValueError("a prefix cache hit needs the prefix_cache it came from")
        return _prefill_from(model, requests[0], device, prefix_cache, hit)
    width = max(len(r.prompt) for r in requests)
    ids = torch.zeros(len(requests), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(requests), width, dtype=torch.bool, device=device)  # True = real token
    for i, request in enumerate(requests):
        ids[i, width - len(request.prompt) :] = torch.tensor(request.prompt, dtype=torch.long)
        mask[i, width - len(request.prompt) :] = True
    cache = model.new_cache()
    padded = any(len(r.prompt) < width for r in requests)
    only = torch.zeros_like(mask)  # the positions whose logits are needed: the last, every one of an echo
    only[:, -1] = True
    for i, request in enumerate(requests):
        if request.prompt_logprobs:
            only[i, width - len(request.prompt) :] = True
    chosen = model(ids, mask if padded else None, cache=cache, only=only)  # [positions, V], row by row
    ends = only.sum(dim=1).cumsum(dim=0)
    logits = chosen.index_select(0, ends - 1)
    echoes = [
        prompt_logprobs(chosen[end - len(r.prompt) : end], r.prompt, r.params.logprobs or 0)
        if r.prompt_logprobs
        else None
        for r, end in zip(requests, ends.tolist())
    ]
    if prefix_cache is not None:
        for i, request in enumerate(requests):
            prefix_cache.store(request.prompt, cache, row=i, start=width - len(request.prompt))
    counts = [r.params.n for r in requests]
    if any(n > 1 for n in counts):  # a request of n choices takes n rows, from the same prefill
        index = torch.repeat_interleave(torch.arange(len(requests), device=device), torch.tensor(counts, device=device))
        cache.reorder(index)
        logits, mask = logits.index_select(0, index), mask.index_select(0, index)
    return cache, mask, logits, echoes


def _prefill_from(
    model: BatchModel, request: BatchRequest, device: torch.device, prefix_cache: PrefixCache, hit: PrefixHit
) -> Prefill:
    """The prefill of one ``request`` whose first ``hit.length`` prompt tokens are in the prefix cache."""
    cache = model.new_cache()
    prefix_cache.restore(hit, cache)
    rest = torch.tensor([request.prompt[hit.length :]], dtype=torch.long, device=device)
    logits = model(rest, None, cache=cache)[:, -1]
    prefix_cache.store(request.prompt, cache)
    mask = torch.ones(1, len(request.prompt), dtype=torch.bool, device=device)
    n = request.params.n
    if n > 1:
        index = torch.zeros(n, dtype=torch.long, device=device)
        cache.reorder(index)
        logits, mask = logits.index_select(0, index), mask.index_select(0, index)
    return cache, mask, logits, [None]
