"""The serving engine's requests and batch rows, and the one batched choice of their next tokens.

:class:`Request` is what :meth:`attnkit.serve.Engine.submit` queues; a request of ``n`` choices decodes as ``n``
:class:`Row` s of the engine's batch. :func:`choose` picks every row's next token with the batch's
:class:`~attnkit.models.generation.Sampler` in one call and keeps one request's failure its own (see there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnkit.models.generation import Sampler, SamplingParams
from attnkit.nn import DecoderCache
from attnkit.serve.events import Event, TokenLogprob, choice_logprobs
from attnkit.text.stops import StopText
from attnkit.text.streaming import StreamDecoder

__all__ = ["Entries", "Request", "Row", "choose", "generators_of", "pad_left", "trim_left"]

log = logging.getLogger(__name__)

Entries = list[TokenLogprob | None] | None
"""Each row's log-probability entry of one choice (``None`` for a row that asks none; ``None``: no row asked)."""


@dataclass(eq=False)
class Request:
    """A request handed to :meth:`attnkit.serve.Engine.submit`: its prompt ids, parameters and the ``sink``
    called (from the engine thread) with each :data:`~attnkit.serve.events.Event`; ``prompt_logprobs``: send a
    :class:`~attnkit.serve.events.Prompt` event first. :meth:`cancel` removes it at the next step."""

    prompt: list[int]
    params: SamplingParams
    sink: Callable[[Event], None]
    prompt_logprobs: bool = False
    cancelled: bool = False
    submitted: float = field(default_factory=time.monotonic)
    generator: torch.Generator | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop decoding this request (e.g. its client went away); its rows leave the batch at the next step."""
        self.cancelled = True


@dataclass(eq=False)
class Row:
    """One choice of a request in the batch: its text so far (``stream``, ``stops``) and its log-probability
    entries (``pending``: not sent in a Piece yet; ``logprobs``: one per id of its text)."""

    request: Request
    index: int
    limit: int  # most tokens this row may generate
    length: int  # real tokens in the row (prompt + generated)
    stream: StreamDecoder
    stops: StopText
    generated: int = 0
    done: bool = False
    pending: list[TokenLogprob] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)


Fail = Callable[[Request, Exception, Sequence[Row]], None]


def choose(
    sampler: Sampler, logits: Tensor, rows: list[Row], generators: list[torch.Generator], fail: Fail
) -> tuple[Tensor, Entries]:
    """Every row's next token (and log-probability entry) from ``logits [B, V]``: ``sampler`` (the ``rows``, in
    order) chooses them in one call. If that raises, the ``generators`` (of the rows that draw) are set back to
    where they were and each request's rows are chosen alone (:meth:`Sampler.subset`): a request whose choice
    still fails is handed to ``fail`` (its rows get token 0 and are done), and the others' tokens, the same
    as in one call, are recorded in ``sampler``. A lone request is failed at once."""
    states = [(g, g.get_state()) for g in generators]
    try:
        choice = sampler.choose(logits)
    except Exception as err:
        for generator, state in states:
            generator.set_state(state)
        return _choose_each(sampler, logits, rows, err, fail)
    return choice.tokens, choice_logprobs(choice, sampler.params)


def _choose_each(
    sampler: Sampler, logits: Tensor, rows: list[Row], err: Exception, fail: Fail
) -> tuple[Tensor, Entries]:
    by_request: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_request.setdefault(id(row.request), []).append(i)
    tokens = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
    if len(by_request) == 1:
        fail(rows[0].request, err, rows)
        return tokens, None
    log.warning("choosing the tokens of %d requests together failed (%s); choosing each alone", len(by_request), err)
    entries: list[TokenLogprob | None] = [None] * len(rows)
    for index in by_request.values():
        try:
            part = sampler.subset(index)
            choice = part.choose(logits[index])
        except Exception as error:
            fail(rows[index[0]].request, error, [rows[i] for i in index])
            continue
        tokens[index] = choice.tokens
        for i, entry in zip(index, choice_logprobs(choice, part.params) or ()):
            entries[i] = entry
    sampler.record(tokens)
    return tokens, entries


def generators_of(rows: Sequence[Row]) -> list[torch.Generator]:
    """The generators of the requests of ``rows`` that draw (not greedy), each once."""
    found = {id(r.request): r.request.generator for r in rows if not r.request.params.greedy}
    return [g for g in found.values() if g is not None]


def trim_left(cache: DecoderCache, mask: Tensor) -> Tensor:
    """Drop the leading columns of ``mask [B, T]`` (True = real token) that are padding in every row, and the
    same positions of ``cache``; return the mask left."""
    lead = int(mask.any(dim=0).nonzero()[0])
    if lead:
        cache.drop_left(lead)
        mask = mask[:, lead:]
    return mask


def pad_left(mask: Tensor, width: int) -> Tensor:
    """``mask [B, T]`` with ``width - T`` False (padding) columns in front."""
    if mask.shape[1] == width:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], width - mask.shape[1]), mask], dim=1)
