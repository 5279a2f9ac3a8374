"""Continuous batching: the rows of many requests decoded as one batch, joining and leaving it between steps.

:class:`ContinuousBatch` is the one decode loop behind the server (:class:`attnkit.serve.Engine` keeps only its
thread, queue, admission limits, cancellation and the text and events it sends each request). Each call returns
an :class:`Update`: the new tokens (with their log-probabilities and how a row ended), the prompts'
log-probabilities and the requests that failed.

- :meth:`~ContinuousBatch.admit` prefills the prompts of new requests in one forward pass
  (:func:`~attnkit.models.generation.prefill.prefill`; a prompt that starts with a prefix in the
  :class:`~attnkit.models.generation.prefix_cache.PrefixCache` alone, from it), chooses their first tokens
  from the prefill's logits and joins their keys and values into the running batch's cache;
- :meth:`~ContinuousBatch.step` feeds every live row's pending token (one forward pass of ``[rows, 1]``) and
  chooses every row's next token in one call;
- :meth:`~ContinuousBatch.drop` removes the rows that ended (a stop id, their length, :meth:`~ContinuousBatch.end`)
  and those of cancelled requests.

The batch is left-padded: the mask is True at real tokens, and each token's position counts only its own row's
tokens, so every row computes what it would alone. Rows that leave are removed from the cache
(``index_select``) and leading columns that became padding in every row are trimmed, so the batch is as wide as
its longest live row.

Next tokens: one :class:`~attnkit.models.generation.Sampler` holds every row (in the batch's order), each with its
request's :class:`~attnkit.models.generation.SamplingParams` and generator (a request's ``n`` rows draw together
from one generator seeded with its ``seed``, so a seeded request gets the same tokens alone or batched). A
request's first tokens come from its prefill's logits, chosen by a sampler of the admitted rows that then joins
the batch's.

Every request fails alone: an error while handling one request's rows (seeding its generator, choosing its
tokens) ends that request (:attr:`Update.failed`, its rows done) and the batch goes on. When choosing the tokens
of several requests together raises, the generators are set back and each request's rows are chosen alone
(:meth:`~attnkit.models.generation.Sampler.subset`), so only the request that causes it fails; likewise a prefill
that fails for several requests together is retried one request at a time. An error of the shared forward pass
(:meth:`~ContinuousBatch.step`) or of joining a prefill into the batch (:attr:`Update.broken`) may leave the batch
broken: its caller fails the live rows and calls :meth:`~ContinuousBatch.clear`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

import torch
from torch import Tensor

from attnkit.models.generation.logprobs import TokenLogprob, choice_logprobs
from attnkit.models.generation.params import SamplingParams
from attnkit.models.generation.prefill import BatchModel, BatchRequest, Prefill, prefill
from attnkit.models.generation.prefix_cache import PrefixCache, PrefixHit
from attnkit.models.generation.processors import Sampler
from attnkit.nn import DecoderCache

__all__ = ["BatchRow", "ContinuousBatch", "NewToken", "Update"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BatchRequest)
Entries = list[TokenLogprob | None] | None
"""Each row's log-probability entry of one choice (``None`` for a row that asks none; ``None``: no row asked)."""


@dataclass(eq=False)
class BatchRow(Generic[R]):
    """Choice ``index`` of ``request`` in the batch: at most ``limit`` new tokens (``max_tokens``, or the room
    left in the context), ``length`` real tokens (prompt + generated), ``generated`` so far; ``done`` once it
    ended or failed (it leaves at the next :meth:`ContinuousBatch.drop`)."""

    request: R
    index: int
    limit: int
    length: int
    generator: torch.Generator | None = field(default=None, repr=False)
    generated: int = 0
    done: bool = False


@dataclass(frozen=True, eq=False)
class NewToken(Generic[R]):
    """Token ``id`` chosen for ``row`` (with its log-probability entry when the request asked for them);
    ``end``: ``"stop"`` (a stop id: the batch's or the request's ``stop_ids``), ``"length"`` (the row's
    ``limit`` reached) or ``None`` (it goes on)."""

    row: BatchRow[R]
    id: int
    logprob: TokenLogprob | None = None
    end: Literal["stop", "length"] | None = None


@dataclass(eq=False)
class Update(Generic[R]):
    """What one :meth:`ContinuousBatch.admit` or :meth:`ContinuousBatch.step` produced, in the order to handle it:
    ``prompts`` (each echo request's prompt log-probabilities), ``ended`` (requests of ``max_tokens`` 0: done
    after their prompt, never joined), ``failed`` (a request and its error: its rows are done), ``tokens`` (one
    per live row, in the batch's order) and ``broken`` (joining a prefill into the batch raised: the error and
    the requests of that admission not failed yet, which never joined; the batch may be broken)."""

    prompts: list[tuple[R, tuple[TokenLogprob | None, ...]]] = field(default_factory=list)
    ended: list[R] = field(default_factory=list)
    failed: list[tuple[R, Exception]] = field(default_factory=list)
    tokens: list[NewToken[R]] = field(default_factory=list)
    broken: tuple[Exception, list[R]] | None = None


@dataclass(eq=False)
class _Joining(Generic[R]):
    """A prefill's rows on their way into the batch, their first tokens chosen."""

    rows: list[BatchRow[R]]
    sampler: Sampler
    cache: DecoderCache
    mask: Tensor
    index: Tensor | None  # the prefill's rows that join (None: all)
    first: Tensor
    entries: Entries


class ContinuousBatch(Generic[R]):
    """The rows of many requests decoded together by ``model`` (a :class:`BatchModel`, e.g.
    :class:`~attnkit.models.LanguageModel`) of ``vocab_size`` tokens on ``device``.

    ``context``: the most tokens a row may hold (prompt + generated). ``stop_ids``: ids that end every row (a
    request adds its own with ``SamplingParams.stop_ids``). ``prefix_cache``: reuse the keys and values of
    cached prompt prefixes (``None``: off); a request that asks its prompt's log-probabilities fills it but never
    reads it (it needs the logits of every prompt position, which the cache does not hold). Not thread-safe: one
    thread calls it. Run it under ``torch.inference_mode()``.
    """

    def __init__(
        self,
        model: BatchModel,
        vocab_size: int,
        *,
        context: int,
        stop_ids: Iterable[int] = (),
        device: torch.device | str = "cpu",
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        if isinstance(context, bool) or not isinstance(context, int) or context < 1:
            raise ValueError(f"context must be an int >= 1 (tokens a row may hold), got {context!r}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an int >= 1 (the model's vocabulary), got {vocab_size!r}")
        self.model = model
        self.vocab_size = int(vocab_size)
        self.context = context
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.device = torch.device(device)
        self.prefix_cache = prefix_cache
        self._rows: list[BatchRow[R]] = []
        self._sampler: Sampler | None = None  # the batch's rows, in order
        self._generators: list[torch.Generator] = []  # those of the live sampled requests
        self._cache: DecoderCache | None = None
        self._mask = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # True = real token
        self._pending = torch.zeros(0, dtype=torch.long, device=self.device)  # chosen, not yet fed
        self.steps = 0  # forward passes of step()
        self.peak_rows = 0  # most rows decoded together
        self.cancelled_rows = 0  # rows dropped unfinished because their request was cancelled

    @property
    def rows(self) -> tuple[BatchRow[R], ...]:
        """The live rows, in the batch's order."""
        return tuple(self._rows)

    @property
    def width(self) -> int:
        """The batch's columns (its longest live row)."""
        return int(self._mask.shape[1])

    # ------------------------------------------------------------------ joining
    def admit(self, requests: Sequence[R]) -> Update[R]:
        """Prefill ``requests`` (together; a failing shared prefill is retried one request at a time), choose
        their first tokens and join their rows into the batch. A request the batch cannot take (an empty prompt,
        one that fills the context, ids outside the vocabulary) fails alone, its error saying why."""
        update: Update[R] = Update()
        fit = []
        for request in requests:
            try:
                self._check(request)
            except (TypeError, ValueError) as err:
                self._fail(update, request, err, ())
                continue
            fit.append(request)
        prefilled = self._prefill_each(fit, update) if fit else []
        for k, (group, prompts) in enumerate(prefilled):
            joining = self._begin(group, prompts, update)
            if joining is None:
                continue
            try:
                self._merge(joining)
            except Exception as err:  # the batch may be broken: every request of this admission fails
                mine = {id(r.request): r.request for r in joining.rows if not r.done}
                update.broken = (err, [*mine.values(), *(r for later, _ in prefilled[k + 1 :] for r in later)])
                return update
            update.tokens += self._advance(joining.rows, joining.first, joining.entries)
        return update

    def _check(self, request: R) -> None:
        """Raise a ``TypeError`` / ``ValueError`` saying what is wrong if ``request`` cannot join this batch."""
        params, prompt = request.params, request.prompt
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be an attnkit.models.generation.SamplingParams, got {type(params).__name__}")
        params.check_vocab(self.vocab_size)
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= self.context:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the context is {self.context} tokens (prompt and "
                "completion together): shorten the prompt"
            )
        vocab = self.vocab_size
        bad = [i for i in prompt if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab]
        if bad:
            raise ValueError(f"prompt token ids must be ints in [0, {vocab}) (the model's vocabulary), got {bad[0]!r}")

    def _prefill_each(self, requests: list[R], update: Update[R]) -> list[tuple[list[R], Prefill]]:
        """The prefill of ``requests`` together; if that pass fails, of each request alone (a request that
        fails alone is failed), so that one request's failure is never the others'. A request whose prompt
        starts with a cached prefix is prefilled alone, from that prefix."""
        done: list[tuple[list[R], Prefill]] = []
        if self.prefix_cache is not None:
            rest = []
            for request in requests:
                hit = None if request.prompt_logprobs else self.prefix_cache.lookup(request.prompt)
                if hit is None or not hit.length:
                    rest.append(request)
                    continue
                try:
                    done.append(([request], self._prefill([request], hit)))
                except Exception as err:
                    self._fail(update, request, err, ())
            requests = rest
            if not requests:
                return done
        try:
            return [*done, (requests, self._prefill(requests))]
        except Exception as err:
            if len(requests) == 1:
                self._fail(update, requests[0], err, ())
                return done
            log.warning("the prefill of %d requests failed (%s); prefilling each alone", len(requests), err)
        for request in requests:
            try:
                done.append(([request], self._prefill([request])))
            except Exception as err:
                self._fail(update, request, err, ())
        return done

    def _prefill(self, requests: list[R], hit: PrefixHit | None = None) -> Prefill:
        return prefill(self.model, requests, self.device, self.prefix_cache, hit)

    def _begin(self, requests: list[R], prefilled: Prefill, update: Update[R]) -> _Joining[R] | None:
        """Report each request's prompt log-probabilities; end the requests of ``max_tokens`` 0; make the rows of
        the others and choose their first tokens from the prefill's logits (a request that fails here fails
        alone). ``None`` when no row is left to join."""
        cache, mask, logits, echoes = prefilled
        rows: list[BatchRow[R]] = []
        keep: list[int] = []
        sampler = Sampler(self.vocab_size, self.device)
        start = 0
        for request, echo in zip(requests, echoes):
            params, n = request.params, request.params.n
            span, start = range(start, start + n), start + n
            if echo is not None:
                update.prompts.append((request, echo))
            if params.max_tokens == 0:  # the prompt's log-probabilities only: never joins the batch
                update.ended.append(request)
                continue
            try:
                room = self.context - len(request.prompt)
                limit = room if params.max_tokens is None else min(params.max_tokens, room)
                generator = torch.Generator(device=self.device)
                generator.manual_seed(params.seed if params.seed is not None else random.getrandbits(63))
                mine = [BatchRow(request, i, limit, len(request.prompt), generator) for i in range(n)]
                sampler.add(params, [request.prompt] * n, generator=generator)
            except Exception as err:
                self._fail(update, request, err, ())
                continue
            rows += mine
            keep += span
        if not rows:
            return None
        index = None if len(keep) == logits.shape[0] else torch.tensor(keep, device=self.device)
        if index is not None:  # requests that failed or ended: their rows leave the prefill
            logits = logits.index_select(0, index)
        first, entries = self._choose(sampler, logits, rows, _generators(rows), update)
        return _Joining(rows, sampler, cache, mask, index, first, entries)

    def _merge(self, joining: _Joining[R]) -> None:
        """Merge a prefill's keys and values, mask, first tokens and sampler into the batch's."""
        cache, mask = joining.cache, joining.mask
        if joining.index is not None:
            cache.reorder(joining.index)
            mask = _trim_left(cache, mask.index_select(0, joining.index))
        if self._cache is None or self._sampler is None:
            self._cache, self._mask, self._pending, self._sampler = cache, mask, joining.first, joining.sampler
        else:
            self._cache.merge(cache)
            width = max(self._mask.shape[1], mask.shape[1])
            self._mask = torch.cat([_pad_left(self._mask, width), _pad_left(mask, width)])
            self._pending = torch.cat([self._pending, joining.first])
            self._sampler.extend(joining.sampler)
        self._rows.extend(joining.rows)
        self._generators = _generators(self._rows)
        self.peak_rows = max(self.peak_rows, len(self._rows))

    # ------------------------------------------------------------------ decoding
    def step(self) -> Update[R]:
        """Feed every row's pending token, choose every row's next one (one call): one token per live row."""
        if self._cache is None or self._sampler is None:
            raise RuntimeError("the batch has no rows to decode: admit requests first")
        ones = torch.ones(len(self._rows), 1, dtype=torch.bool, device=self.device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        logits = self.model(self._pending[:, None], self._mask, cache=self._cache)[:, -1]
        self.steps += 1
        update: Update[R] = Update()
        tokens, entries = self._choose(self._sampler, logits, self._rows, self._generators, update)
        self._pending = tokens
        update.tokens = self._advance(self._rows, tokens, entries)
        return update

    def _advance(self, rows: list[BatchRow[R]], tokens: Tensor, entries: Entries) -> list[NewToken[R]]:
        """Count each live row's new token; a stop id or the row's limit ends it."""
        out: list[NewToken[R]] = []
        for i, (row, token) in enumerate(zip(rows, tokens.tolist())):
            if row.done or row.request.cancelled:
                continue  # a failed request's row, or a cancelled one: leaves the batch at drop()
            row.generated += 1
            row.length += 1
            end: Literal["stop", "length"] | None = None
            if token in self.stop_ids or token in row.request.params.stop_ids:
                end = "stop"
            elif row.generated >= row.limit:
                end = "length"
            row.done = end is not None
            out.append(NewToken(row, token, None if entries is None else entries[i], end))
        return out

    def _choose(
        self, sampler: Sampler, logits: Tensor, rows: list[BatchRow[R]], generators: list[torch.Generator],
        update: Update[R],
    ) -> tuple[Tensor, Entries]:  # fmt: skip
        """Every row's next token (and log-probability entry) from ``logits [B, V]`` in one ``sampler`` call. If
        that raises, the ``generators`` are set back to where they were and each request's rows are chosen alone:
        a request whose choice still fails is failed (its rows get token 0 and are done), and the others' tokens,
        the same as in one call, are recorded in ``sampler``. A lone request is failed at once."""
        states = [(g, g.get_state()) for g in generators]
        try:
            choice = sampler.choose(logits)
        except Exception as err:
            for generator, state in states:
                generator.set_state(state)
            return self._choose_each(sampler, logits, rows, err, update)
        return choice.tokens, choice_logprobs(choice, sampler.params)

    def _choose_each(
        self, sampler: Sampler, logits: Tensor, rows: list[BatchRow[R]], err: Exception, update: Update[R]
    ) -> tuple[Tensor, Entries]:
        by_request: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_request.setdefault(id(row.request), []).append(i)
        tokens = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
        if len(by_request) == 1:
            self._fail(update, rows[0].request, err, rows)
            return tokens, None
        log.warning(
            "choosing the tokens of %d requests together failed (%s); choosing each alone", len(by_request), err
        )
        entries: list[TokenLogprob | None] = [None] * len(rows)
        for index in by_request.values():
            try:
                part = sampler.subset(index)
                choice = part.choose(logits[index])
            except Exception as error:
                self._fail(update, rows[index[0]].request, error, [rows[i] for i in index])
                continue
            tokens[index] = choice.tokens
            for i, entry in zip(index, choice_logprobs(choice, part.params) or ()):
                entries[i] = entry
        sampler.record(tokens)
        return tokens, entries

    @staticmethod
    def _fail(update: Update[R], request: R, err: Exception, rows: Sequence[BatchRow[R]]) -> None:
        for row in rows:
            row.done = True
        update.failed.append((request, err))

    # ------------------------------------------------------------------ leaving
    def end(self, request: R, index: int | None = None) -> None:
        """End the rows of ``request`` now (only its choice ``index`` if given): its caller stopped them (a stop
        string, an error of its own). They leave at the next :meth:`drop`."""
        for row in self._rows:
            if row.request is request and (index is None or row.index == index):
                row.done = True

    def drop(self) -> None:
        """Remove the rows that are done and those of cancelled requests (counted in ``cancelled_rows``), then
        trim leading all-padding columns."""
        keep = [i for i, row in enumerate(self._rows) if not (row.done or row.request.cancelled)]
        if len(keep) == len(self._rows):
            return
        self.cancelled_rows += sum(1 for row in self._rows if row.request.cancelled and not row.done)
        if not keep:
            self.clear()
            return
        index = torch.tensor(keep, device=self.device)
        self._rows = [self._rows[i] for i in keep]
        self._generators = _generators(self._rows)
        assert self._cache is not None and self._sampler is not None
        self._cache.reorder(index)
        self._sampler.keep(index)
        self._mask = _trim_left(self._cache, self._mask.index_select(0, index))
        self._pending = self._pending.index_select(0, index)

    def clear(self) -> list[R]:
        """Empty the batch -> the requests whose rows had not ended (each once, in order)."""
        unfinished = {id(row.request): row.request for row in self._rows if not row.done}
        # the mask first: another thread that reads no rows (the server's stats) reads no columns either
        self._mask, self._pending = self._mask[:0, :0], self._pending[:0]
        self._rows, self._cache, self._sampler, self._generators = [], None, None, []
        return list(unfinished.values())


def _generators(rows: Sequence[BatchRow[R]]) -> list[torch.Generator]:
    """The generators of the requests of ``rows`` that draw (not greedy), each once."""
    found = {id(r.request): r.generator for r in rows if not r.request.params.greedy}
    return [g for g in found.values() if g is not None]


def _trim_left(cache: DecoderCache, mask: Tensor) -> Tensor:
    """Drop the leading columns of ``mask [B, T]`` (True = real token) that are padding in every row, and the
    same positions of ``cache``; return the mask left."""
    lead = int(mask.any(dim=0).nonzero()[0])
    if lead:
        cache.drop_left(lead)
        mask = mask[:, lead:]
    return mask


def _pad_left(mask: Tensor, width: int) -> Tensor:
    """``mask [B, T]`` with ``width - T`` False (padding) columns in front."""
    if mask.shape[1] == width:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], width - mask.shape[1]), mask], dim=1)
