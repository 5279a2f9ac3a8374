"""The serving engine: one background thread decodes every live sequence as one batch (continuous batching).

:class:`Engine` owns a :class:`~attnkit.models.LanguageModel`. :meth:`Engine.submit` queues a
:class:`Request` (prompt ids, :class:`SamplingParams`, a ``sink`` that receives its :data:`Event` s);
the thread admits waiting requests into the running batch at the next step (each prompt prefilled
alone, its key/value cache then merged into the batch's), so a request never waits for the others to
finish. The batch is left-padded: ``key_padding_mask`` is True at real tokens, and each token's
position counts only its own row's tokens, so every row computes what it would alone. Finished and
cancelled rows leave the batch (``index_select``) and leading columns that became padding in every
row are trimmed, so the batch is as wide as its longest live row.

Every request fails alone: an error while handling one request's rows (seeding its generator, sampling its
tokens, decoding its text, stop strings) ends that request with a :class:`Failed` event and the batch goes
on. A prefill that fails for several requests together is retried one request at a time, so only the
request that causes it fails. Only an error of the shared decoding step itself fails every live row.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnkit.models import LanguageModel
from attnkit.models.generation import check_max_tokens, check_sampling, sample_next_token
from attnkit.nn import DecoderCache
from attnkit.text.stops import StopText
from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import Tokenizer

__all__ = ["Engine", "Event", "Failed", "Finished", "Piece", "Request", "SamplingParams"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded.

    ``max_tokens``: most new tokens per choice (``None``: up to the context). ``temperature`` 0 is
    greedy; ``top_p`` < 1 keeps the nucleus. ``seed`` gives the request its own ``torch.Generator``,
    so a seeded request writes the same text alone or in a batch. ``stop``: strings that end a
    choice (its text is cut before them); ``n``: independent choices (one batch row each); ``stop_ids``:
    token ids that end a choice besides the engine's (e.g. a chat template's end-of-turn).
    """

    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    stop_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Piece:
    """New text of choice ``index`` (never past a stop string)."""

    index: int
    text: str


@dataclass(frozen=True)
class Finished:
    """Choice ``index`` ended: ``reason`` is ``"stop"`` (a stop id or string) or ``"length"``
    (``max_tokens`` or the context); ``tokens`` is how many tokens it generated (a stop id included),
    ``ids`` the ids of its text (without the stop id)."""

    index: int
    reason: str
    tokens: int
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Failed:
    """The request failed inside the engine (the server answers 500); nothing more follows (for any of
    its choices)."""

    message: str


Event = Piece | Finished | Failed


@dataclass(eq=False)
class Request:
    """A request handed to :meth:`Engine.submit`: its prompt ids, parameters and the ``sink`` called
    (from the engine thread) with each :data:`Event`. :meth:`cancel` removes it at the next step."""

    prompt: list[int]
    params: SamplingParams
    sink: Callable[[Event], None]
    cancelled: bool = False
    submitted: float = field(default_factory=time.monotonic)
    generator: torch.Generator | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop decoding this request (e.g. its client went away); its rows leave the batch at the next step."""
        self.cancelled = True


@dataclass(eq=False)
class _Row:
    request: Request
    index: int
    limit: int  # most tokens this row may generate
    length: int  # real tokens in the row (prompt + generated)
    stream: StreamDecoder
    stops: StopText
    generated: int = 0
    done: bool = False


class Engine:
    """Continuous-batching decoder of ``model`` with ``tokenizer`` on a background thread.

    ``stop_ids``: token ids that end every choice (default: the model's EOS; never part of the text;
    a request adds its own with :attr:`SamplingParams.stop_ids`). ``max_batch``:
    most live rows (a request of ``n`` choices takes ``n``); further requests wait in order.
    ``context``: the most tokens a row may hold (prompt + generated; default the model's ``max_len``).
    Start with :meth:`start` (or use as a context manager); :meth:`shutdown` stops the thread.
    """

    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        *,
        stop_ids: Sequence[int] | None = None,
        max_batch: int = 32,
        context: int | None = None,
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.stop_ids = frozenset(int(i) for i in (stop_ids if stop_ids is not None else [model.config.eos_id]))
        self.max_batch = max_batch
        self.context = int(context or model.config.max_len)
        if not 1 <= self.context <= model.config.max_len:
            raise ValueError(f"context must be in [1, {model.config.max_len}] (the model's max_len), got {context}")
        self._device = next(model.parameters()).device
        self._waiting: deque[Request] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._rows: list[_Row] = []
        self._cache: DecoderCache | None = None
        self._mask = torch.zeros(0, 0, dtype=torch.bool, device=self._device)  # True = real token
        self._pending = torch.zeros(0, dtype=torch.long, device=self._device)  # sampled, not yet fed
        self.steps = 0
        self.peak_rows = 0
        self.cancelled_rows = 0

    # ------------------------------------------------------------------ public
    def start(self) -> Engine:
        """Start the decoding thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="attnkit-serve-engine", daemon=True)
            self._thread.start()
        return self

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the thread; requests still waiting or decoding get a :class:`Failed` event."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def check(self, prompt: Sequence[int], params: SamplingParams) -> None:
        """Raise a ``ValueError`` if ``prompt`` (ids) does not fit the context or ``params`` are invalid
        (the sampling options by :func:`attnkit.models.generation.check_sampling`, which names the field)."""
        check_sampling(params.temperature, top_p=params.top_p, seed=params.seed)
        check_max_tokens(params.max_tokens, minimum=1)
        if isinstance(params.n, bool) or not isinstance(params.n, int) or not 1 <= params.n <= self.max_batch:
            raise ValueError(f"n must be in [1, {self.max_batch}] (the server's --max-batch), got {params.n!r}")
        if isinstance(params.stop, str) or not all(isinstance(s, str) and s for s in params.stop):
            raise ValueError(f"stop must be a tuple of non-empty strings, got {params.stop!r}")
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= self.context:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the model's context is {self.context} tokens "
                "(prompt and completion together): shorten the prompt"
            )
        vocab = self.model.config.vocab_size
        bad = [i for i in prompt if isinstance(i, bool) or not hasattr(i, "__index__") or not 0 <= int(i) < vocab]
        if bad:
            raise ValueError(f"prompt token ids must be ints in [0, {vocab}) (the model's vocabulary), got {bad[0]!r}")

    def submit(self, prompt: Sequence[int], params: SamplingParams, sink: Callable[[Event], None]) -> Request:
        """Queue a request (checked by :meth:`check`); it joins the batch at the next step. ``sink``
        receives its events from the engine thread: hand them over thread-safely."""
        self.check(prompt, params)
        request = Request([int(i) for i in prompt], params, sink)
        with self._wake:
            if self._stopping:
                raise RuntimeError("the engine is shut down")
            self._waiting.append(request)
            self._wake.notify_all()
        return request

    def stats(self) -> dict[str, int]:
        """``live_rows`` (decoding now), ``waiting`` (requests not yet admitted), ``width`` (batch columns),
        ``steps`` (decoding steps so far), ``peak_rows`` (most rows decoded together) and ``cancelled_rows``
        (rows removed unfinished because their request was cancelled)."""
        return {
            "live_rows": len(self._rows),
            "waiting": len(self._waiting),
            "width": int(self._mask.shape[1]),
            "steps": self.steps,
            "peak_rows": self.peak_rows,
            "cancelled_rows": self.cancelled_rows,
        }

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._wake:
                    while not self._stopping and not self._rows and not self._waiting:
                        self._wake.wait()
                    if self._stopping:
                        break
                try:
                    self._admit()
                    if self._rows:
                        self._step()
                except Exception as err:  # a failed step fails its rows; the server keeps serving
                    log.exception("decoding step failed")
                    self._fail_all(f"the engine failed: {type(err).__name__}: {err}")
        self._fail_all("the server is shutting down")
        with self._wake:
            waiting, self._waiting = list(self._waiting), deque()
        for request in waiting:
            _send(request, Failed("the server is shutting down"))

    def _admit(self) -> None:
        """Prefill, together, the waiting requests that fit ``max_batch`` and merge them into the batch."""
        self._drop(lambda row: row.request.cancelled)
        while True:
            admitted: list[Request] = []
            with self._wake:
                rows = len(self._rows)
                while self._waiting:
                    request = self._waiting[0]
                    if not request.cancelled and rows + request.params.n > self.max_batch:
                        break  # in order: the next request waits for room
                    self._waiting.popleft()
                    if not request.cancelled:
                        admitted.append(request)
                        rows += request.params.n
            if not admitted:
                return
            prefilled = self._prefill_each(admitted)
            while prefilled:
                group, prompts = prefilled.pop(0)
                try:
                    self._join(group, *prompts)
                except Exception as err:  # merging failed: the batch may be broken, _run fails its rows
                    _fail_all_of([r for later, _ in prefilled for r in later], err)
                    raise
            self._drop(lambda row: row.done or row.request.cancelled)

    def _prefill_each(self, requests: list[Request]) -> list[tuple[list[Request], tuple[DecoderCache, Tensor, Tensor]]]:
        """The prefill of ``requests`` together; if that pass fails, of each request alone (a request that
        fails alone gets a :class:`Failed` event), so that one request's failure is never the others'."""
        try:
            return [(requests, self._prefill(requests))]
        except Exception as err:
            if len(requests) == 1:
                self._fail(requests[0], err, [])
                return []
            log.warning("the prefill of %d requests failed (%s); prefilling each alone", len(requests), err)
        done = []
        for request in requests:
            try:
                done.append(([request], self._prefill([request])))
            except Exception as err:
                self._fail(request, err, [])
        return done

    def _prefill(self, requests: list[Request]) -> tuple[DecoderCache, Tensor, Tensor]:
        """One forward pass over the prompts of ``requests``, left-padded to the longest (positions count
        each row's own tokens; a request alone passes no mask) -> ``(cache, mask, last logits)``, one row
        per choice. Changes nothing of the batch."""
        width = max(len(r.prompt) for r in requests)
        ids = torch.zeros(len(requests), width, dtype=torch.long, device=self._device)
        mask = torch.zeros(len(requests), width, dtype=torch.bool, device=self._device)  # True = real token
        for i, request in enumerate(requests):
            ids[i, width - len(request.prompt) :] = torch.tensor(request.prompt, dtype=torch.long)
            mask[i, width - len(request.prompt) :] = True
        cache = self.model.new_cache()
        padded = any(len(r.prompt) < width for r in requests)
        logits = self.model(ids, mask if padded else None, cache=cache)[:, -1]
        counts = [r.params.n for r in requests]
        if any(n > 1 for n in counts):  # a request of n choices takes n rows, from the same prefill
            index = torch.repeat_interleave(
                torch.arange(len(requests), device=self._device), torch.tensor(counts, device=self._device)
            )
            cache.reorder(index)
            logits, mask = logits.index_select(0, index), mask.index_select(0, index)
        return cache, mask, logits

    def _join(self, requests: list[Request], cache: DecoderCache, mask: Tensor, logits: Tensor) -> None:
        """Each request's first tokens from its prefill's ``logits`` (a request that fails here fails
        alone: its rows join as finished, and leave), then the prefill merged into the batch."""
        rows: list[_Row] = []
        tokens: list[Tensor] = []
        start = 0
        for request in requests:
            params, n = request.params, request.params.n
            room = self.context - len(request.prompt)
            limit = room if params.max_tokens is None else min(params.max_tokens, room)
            try:
                mine = [
                    _Row(request, i, limit, len(request.prompt), StreamDecoder(self.tokenizer), StopText(params.stop))
                    for i in range(n)
                ]
                request.generator = torch.Generator(device=self._device)
                request.generator.manual_seed(params.seed if params.seed is not None else random.getrandbits(63))
                tokens.append(self._sample(logits[start : start + n], params, request.generator))
            except Exception as err:
                mine = [
                    _Row(request, i, 0, len(request.prompt), StreamDecoder(self.tokenizer), StopText(()), done=True)
                    for i in range(n)
                ]
                tokens.append(torch.zeros(n, dtype=torch.long, device=self._device))
                self._fail(request, err, mine)
            rows += mine
            start += n
        try:
            first = torch.cat(tokens)
            if self._cache is None:
                self._cache, self._mask, self._pending = cache, mask, first
            else:
                self._cache.merge(cache)
                width = max(self._mask.shape[1], mask.shape[1])
                self._mask = torch.cat([_pad_left(self._mask, width), _pad_left(mask, width)])
                self._pending = torch.cat([self._pending, first])
        except Exception as err:  # not joined: the requests not failed yet fail now (then the batch)
            _fail_all_of(list({id(r.request): r.request for r in rows if not r.done}.values()), err)
            raise
        self._rows.extend(rows)
        self.peak_rows = max(self.peak_rows, len(self._rows))
        for row, token in zip(rows, first.tolist()):
            self._accept(row, token)

    def _step(self) -> None:
        """Feed every row's pending token, sample the next one per request, emit, drop finished rows."""
        assert self._cache is not None
        ones = torch.ones(len(self._rows), 1, dtype=torch.bool, device=self._device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        logits = self.model(self._pending[:, None], self._mask, cache=self._cache)[:, -1]
        self.steps += 1
        tokens = torch.zeros(len(self._rows), dtype=torch.long, device=self._device)
        groups: dict[int, list[int]] = {}
        for i, row in enumerate(self._rows):
            groups.setdefault(id(row.request), []).append(i)
        greedy = None
        for idx in groups.values():
            request = self._rows[idx[0]].request
            index = torch.tensor(idx, device=self._device)
            try:
                if request.params.temperature == 0:
                    greedy = logits.argmax(dim=-1) if greedy is None else greedy
                    tokens[index] = greedy[index]
                else:
                    tokens[index] = self._sample(logits[index], request.params, request.generator)
            except Exception as err:  # this request's rows only: the others' tokens are drawn
                self._fail(request, err, [self._rows[i] for i in idx])
        self._pending = tokens
        for row, token in zip(self._rows, tokens.tolist()):
            self._accept(row, token)
        self._drop(lambda row: row.done or row.request.cancelled)

    def _sample(self, logits: Tensor, params: SamplingParams, generator: torch.Generator | None) -> Tensor:
        if params.temperature == 0:
            return logits.argmax(dim=-1)
        top_p = params.top_p if params.top_p < 1 else None
        return sample_next_token(logits, temperature=params.temperature, top_p=top_p, generator=generator)

    def _accept(self, row: _Row, token: int) -> None:
        """Record ``token`` as the next of ``row``: emit its text, or end the row. An error here (decoding
        the text, stop strings) fails the row's request only."""
        if row.done or row.request.cancelled:
            return  # a failed request's row, or a cancelled one: leaves the batch in _drop
        try:
            self._advance(row, token)
        except Exception as err:
            self._fail(row.request, err, [r for r in self._rows if r.request is row.request])

    def _advance(self, row: _Row, token: int) -> None:
        row.generated += 1
        row.length += 1
        if token in self.stop_ids or token in row.request.params.stop_ids:
            self._finish(row, "stop", final=row.stops.flush(row.stream.flush()))
            return
        text, stopped = row.stops.add(row.stream.push(token))
        if stopped:
            self._finish(row, "stop", final=text)
        elif row.generated >= row.limit:
            self._finish(row, "length", final=text + row.stops.flush(row.stream.flush()))
        elif text:
            _send(row.request, Piece(row.index, text))

    def _fail(self, request: Request, err: Exception, rows: Sequence[_Row]) -> None:
        """End ``request`` alone: its ``rows`` are done (they leave the batch at the next drop) and it gets
        a :class:`Failed` event; every other request goes on."""
        log.error("request failed: %s: %s", type(err).__name__, err, exc_info=err)
        for row in rows:
            row.done = True
        _send(request, Failed(f"the request failed in the engine: {type(err).__name__}: {err}"))

    def _finish(self, row: _Row, reason: str, final: str) -> None:
        if final:
            _send(row.request, Piece(row.index, final))
        _send(row.request, Finished(row.index, reason, row.generated, tuple(row.stream.ids)))
        row.done = True

    def _drop(self, gone: Callable[[_Row], bool]) -> None:
        """Remove the rows ``gone`` selects from the batch, then trim leading all-padding columns."""
        keep = [i for i, row in enumerate(self._rows) if not gone(row)]
        if len(keep) == len(self._rows):
            return
        kept = set(keep)
        self.cancelled_rows += sum(
            1 for i, row in enumerate(self._rows) if i not in kept and row.request.cancelled and not row.done
        )
        if not keep:
            self._rows, self._cache = [], None
            self._mask = self._mask[:0, :0]
            self._pending = self._pending[:0]
            return
        index = torch.tensor(keep, device=self._device)
        self._rows = [self._rows[i] for i in keep]
        assert self._cache is not None
        self._cache.reorder(index)
        self._mask = self._mask.index_select(0, index)
        self._pending = self._pending.index_select(0, index)
        lead = int(self._mask.any(dim=0).nonzero()[0])
        if lead:
            self._cache.drop_left(lead)
            self._mask = self._mask[:, lead:]

    def _fail_all(self, message: str) -> None:
        requests = {id(row.request): row.request for row in self._rows if not row.done}
        self._rows, self._cache = [], None
        self._mask = self._mask[:0, :0]
        self._pending = self._pending[:0]
        for request in requests.values():
            _send(request, Failed(message))


def _pad_left(mask: Tensor, width: int) -> Tensor:
    """``mask [B, T]`` with ``width - T`` False (padding) columns in front."""
    if mask.shape[1] == width:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], width - mask.shape[1]), mask], dim=1)


def _fail_all_of(requests: list[Request], err: Exception) -> None:
    for request in requests:
        _send(request, Failed(f"the engine failed: {type(err).__name__}: {err}"))


def _send(request: Request, event: Event) -> None:
    try:
        request.sink(event)
    except Exception:  # a sink that fails (its event loop closed) must not stop the engine
        log.debug("could not deliver %r", event, exc_info=True)
