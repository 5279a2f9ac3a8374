"""The serving engine: one background thread decodes every live sequence as one batch (continuous batching).

:class:`Engine` owns a :class:`~attnkit.models.LanguageModel`. :meth:`Engine.submit` queues a
:class:`Request` (prompt ids, :class:`~attnkit.models.generation.SamplingParams`, a ``sink`` that receives its
:data:`~attnkit.serve.events.Event` s); the thread admits waiting requests into the running batch at the next
step (their prompts prefilled together, the key/value cache then merged into the batch's), so a request never
waits for the others to finish. The batch is left-padded: ``key_padding_mask`` is True at real tokens, and each
token's position counts only its own row's tokens, so every row computes what it would alone. Finished and
cancelled rows leave the batch (``index_select``) and leading columns that became padding in every row are
trimmed, so the batch is as wide as its longest live row.

Next tokens: one :class:`~attnkit.models.generation.Sampler` holds every row of the batch (in the batch's row
order), each with its request's parameters and generator (a request's rows draw together, so a seeded request
gets the same tokens alone or batched); each step chooses every row's token in one call. A request's first
tokens come from its prefill's logits, chosen by a sampler of the admitted rows that then joins the batch's.
Log-probabilities (``SamplingParams.logprobs``) ride on the :class:`Piece` and :class:`Finished` events; a
request submitted with ``prompt_logprobs`` first gets a :class:`Prompt` event (its prompt's log-probabilities,
from a log-softmax at every prompt position of its prefill), and with ``max_tokens`` 0 it ends there.

Every request fails alone: an error while handling one request's rows (seeding its generator, choosing its
tokens, decoding its text, stop strings) ends that request with a :class:`Failed` event and the batch goes
on. When choosing the tokens of several requests together raises, the generators are set back and each
request's rows are chosen alone (:meth:`~attnkit.models.generation.Sampler.subset`), so only the request that
causes it fails; likewise a prefill that fails for several requests together is retried one request at a time.
Only an error of the shared decoding step itself fails every live row.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnkit.models import LanguageModel
from attnkit.models.generation import MAX_TOKENS, Sampler, SamplingError, SamplingParams
from attnkit.models.generation.prefix_cache import PrefixCache, PrefixHit
from attnkit.nn import DecoderCache
from attnkit.serve.events import (
    Event,
    Failed,
    Finished,
    Piece,
    Prompt,
    TokenLogprob,
)
from attnkit.serve.prefill import Prefill, prefill
from attnkit.serve.rows import Request, Row, choose, generators_of, pad_left, trim_left
from attnkit.text.stops import StopText
from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import Tokenizer

__all__ = [
    "Engine",
    "Event",
    "Failed",
    "Finished",
    "Piece",
    "Prompt",
    "Request",
    "SamplingParams",
    "TokenLogprob",
]

log = logging.getLogger(__name__)


class Engine:
    """Continuous-batching decoder of ``model`` with ``tokenizer`` on a background thread.

    ``stop_ids``: token ids that end every choice (default: the model's EOS; never part of the text;
    a request adds its own with :attr:`SamplingParams.stop_ids`). ``max_batch``:
    most live rows (a request of ``n`` choices takes ``n``); further requests wait in order.
    ``context``: the most tokens a row may hold (prompt + generated; default the model's ``max_len``).
    ``prefix_cache``: a :class:`~attnkit.models.generation.prefix_cache.PrefixCache` (``None``: off): a request
    whose prompt starts like an earlier one's (whole blocks) is prefilled alone from the cached keys and values
    of that prefix, and every prefill's prompt is kept there (echo requests, which score every prompt position,
    neither use nor fill it). Start with :meth:`start` (or use as a context manager); :meth:`shutdown` stops the thread.
    """

    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        *,
        stop_ids: Sequence[int] | None = None,
        max_batch: int = 32,
        context: int | None = None,
        prefix_cache: PrefixCache | None = None,
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
        self.prefix_cache = prefix_cache
        self._waiting: deque[Request] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._vocab = int(model.config.vocab_size)
        self._rows: list[Row] = []
        self._sampler: Sampler | None = None  # the batch's rows, in order
        self._generators: list[torch.Generator] = []  # those of the live sampled requests
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

    def check(self, prompt: Sequence[int], params: SamplingParams, *, prompt_logprobs: bool = False) -> None:
        """Raise a ``ValueError`` if ``prompt`` (ids) or ``params`` do not fit this engine: ``n`` past
        ``max_batch``, a token id of ``params`` past the vocabulary, ``max_tokens`` 0 without ``prompt_logprobs``
        (a :class:`~attnkit.models.generation.SamplingError` naming the field), a prompt that is empty, holds ids
        outside the vocabulary or fills the context. The options themselves were checked when ``params`` was made."""
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be an attnkit.models.generation.SamplingParams, got {type(params).__name__}")
        if params.n > self.max_batch:
            raise SamplingError("n", f"n must be in [1, {self.max_batch}] (the server's --max-batch), got {params.n!r}")
        vocab = self._vocab
        params.check_vocab(vocab)
        if params.max_tokens == 0 and not prompt_logprobs:
            raise SamplingError(
                "max_tokens",
                f"max_tokens must be an int in [1, {MAX_TOKENS}] (0 only with the prompt's log-probabilities, "
                f"echo), got {params.max_tokens!r}",
            )
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= self.context:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the model's context is {self.context} tokens "
                "(prompt and completion together): shorten the prompt"
            )
        bad = [i for i in prompt if isinstance(i, bool) or not hasattr(i, "__index__") or not 0 <= int(i) < vocab]
        if bad:
            raise ValueError(f"prompt token ids must be ints in [0, {vocab}) (the model's vocabulary), got {bad[0]!r}")

    def submit(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        sink: Callable[[Event], None],
        *,
        prompt_logprobs: bool = False,
    ) -> Request:
        """Queue a request (checked by :meth:`check`); it joins the batch at the next step. ``sink``
        receives its events from the engine thread: hand them over thread-safely. ``prompt_logprobs``: send
        the prompt's log-probabilities first (a :class:`Prompt` event; with ``max_tokens`` 0, nothing else but
        a :class:`Finished` per choice)."""
        self.check(prompt, params, prompt_logprobs=prompt_logprobs)
        request = Request([int(i) for i in prompt], params, sink, prompt_logprobs=bool(prompt_logprobs))
        with self._wake:
            if self._stopping:
                raise RuntimeError("the engine is shut down")
            self._waiting.append(request)
            self._wake.notify_all()
        return request

    def stats(self) -> dict[str, int]:
        """``live_rows`` (decoding now), ``waiting`` (requests not yet admitted), ``width`` (batch columns),
        ``steps`` (decoding steps so far), ``peak_rows`` (most rows decoded together), ``cancelled_rows``
        (rows removed unfinished because their request was cancelled) and, with a prefix cache, its counters
        prefixed ``prefix_`` (``prefix_hits``, ``prefix_reused_tokens``, ``prefix_bytes``, ...)."""
        return {
            "live_rows": len(self._rows),
            "waiting": len(self._waiting),
            "width": int(self._mask.shape[1]),
            "steps": self.steps,
            "peak_rows": self.peak_rows,
            "cancelled_rows": self.cancelled_rows,
            **({} if self.prefix_cache is None else {f"prefix_{k}": v for k, v in self.prefix_cache.stats().items()}),
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

    def _prefill_each(self, requests: list[Request]) -> list[tuple[list[Request], Prefill]]:
        """The prefill of ``requests`` together; if that pass fails, of each request alone (a request that
        fails alone gets a :class:`Failed` event), so that one request's failure is never the others'. A request
        whose prompt starts with a cached prefix is prefilled alone, from that prefix."""
        done: list[tuple[list[Request], Prefill]] = []
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
                    self._fail(request, err, [])
            requests = rest
            if not requests:
                return done
        try:
            return [*done, (requests, self._prefill(requests))]
        except Exception as err:
            if len(requests) == 1:
                self._fail(requests[0], err, [])
                return []
            log.warning("the prefill of %d requests failed (%s); prefilling each alone", len(requests), err)
        for request in requests:
            try:
                done.append(([request], self._prefill([request])))
            except Exception as err:
                self._fail(request, err, [])
        return done

    def _prefill(self, requests: list[Request], hit: PrefixHit | None = None) -> Prefill:
        """:func:`~attnkit.serve.prefill.prefill` of ``requests`` with this engine's model and prefix cache."""
        return prefill(self.model, requests, self._device, self.prefix_cache, hit)

    def _join(
        self,
        requests: list[Request],
        cache: DecoderCache,
        mask: Tensor,
        logits: Tensor,
        echoes: list[tuple[TokenLogprob | None, ...] | None],
    ) -> None:
        """Send each request's :class:`Prompt`; end the requests of ``max_tokens`` 0; add the rows of the others
        to a sampler that chooses their first tokens from the prefill's ``logits`` (a request that fails here
        fails alone), then merge the prefill and that sampler into the batch's."""
        rows: list[Row] = []
        keep: list[int] = []
        group = Sampler(self._vocab, self._device)
        start = 0
        for request, echo in zip(requests, echoes):
            params, n = request.params, request.params.n
            span, start = range(start, start + n), start + n
            try:
                if echo is not None:
                    _send(request, Prompt(echo))
                if params.max_tokens == 0:  # the prompt's log-probabilities only: never joins the batch
                    for i in range(n):
                        _send(request, Finished(i, "length", 0, ()))
                    continue
                room = self.context - len(request.prompt)
                limit = room if params.max_tokens is None else min(params.max_tokens, room)
                mine = [
                    Row(request, i, limit, len(request.prompt), StreamDecoder(self.tokenizer), StopText(params.stop))
                    for i in range(n)
                ]
                request.generator = torch.Generator(device=self._device)
                request.generator.manual_seed(params.seed if params.seed is not None else random.getrandbits(63))
                group.add(params, [request.prompt] * n, generator=request.generator)
            except Exception as err:
                self._fail(request, err, [])
                continue
            rows += mine
            keep += span
        if not rows:
            return
        index = None if len(keep) == logits.shape[0] else torch.tensor(keep, device=self._device)
        if index is not None:  # requests that failed or ended: their rows leave the prefill
            logits = logits.index_select(0, index)
        first, entries = choose(group, logits, rows, generators_of(rows), self._fail)
        try:
            if index is not None:
                cache.reorder(index)
                mask = mask.index_select(0, index)
                mask = trim_left(cache, mask)
            if self._cache is None or self._sampler is None:
                self._cache, self._mask, self._pending, self._sampler = cache, mask, first, group
            else:
                self._cache.merge(cache)
                width = max(self._mask.shape[1], mask.shape[1])
                self._mask = torch.cat([pad_left(self._mask, width), pad_left(mask, width)])
                self._pending = torch.cat([self._pending, first])
                self._sampler.extend(group)
        except Exception as err:  # not joined: the requests not failed yet fail now (then the batch)
            _fail_all_of(list({id(r.request): r.request for r in rows if not r.done}.values()), err)
            raise
        self._rows.extend(rows)
        self._generators = generators_of(self._rows)
        self.peak_rows = max(self.peak_rows, len(self._rows))
        for i, (row, token) in enumerate(zip(rows, first.tolist())):
            self._accept(row, token, None if entries is None else entries[i])

    def _step(self) -> None:
        """Feed every row's pending token, choose every row's next one (one call), emit, drop finished rows."""
        assert self._cache is not None and self._sampler is not None
        ones = torch.ones(len(self._rows), 1, dtype=torch.bool, device=self._device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        logits = self.model(self._pending[:, None], self._mask, cache=self._cache)[:, -1]
        self.steps += 1
        tokens, entries = choose(self._sampler, logits, self._rows, self._generators, self._fail)
        self._pending = tokens
        for i, (row, token) in enumerate(zip(self._rows, tokens.tolist())):
            self._accept(row, token, None if entries is None else entries[i])
        self._drop(lambda row: row.done or row.request.cancelled)

    def _accept(self, row: Row, token: int, entry: TokenLogprob | None = None) -> None:
        """Record ``token`` (and its log-probability ``entry``) as the next of ``row``: emit its text, or end the
        row. An error here (decoding the text, stop strings) fails the row's request only."""
        if row.done or row.request.cancelled:
            return  # a failed request's row, or a cancelled one: leaves the batch in _drop
        try:
            self._advance(row, token, entry)
        except Exception as err:
            self._fail(row.request, err, [r for r in self._rows if r.request is row.request])

    def _advance(self, row: Row, token: int, entry: TokenLogprob | None) -> None:
        row.generated += 1
        row.length += 1
        if entry is not None:  # a stop id's too: OpenAI and vLLM report it, and lm-eval scores with it
            row.pending.append(entry)
            row.logprobs.append(entry)
        if token in self.stop_ids or token in row.request.params.stop_ids:
            self._finish(row, "stop", final=row.stops.flush(row.stream.flush()))
            return
        text, stopped = row.stops.add(row.stream.push(token))
        if stopped:
            self._finish(row, "stop", final=text)
        elif row.generated >= row.limit:
            self._finish(row, "length", final=text + row.stops.flush(row.stream.flush()))
        elif text:
            _send(row.request, Piece(row.index, text, tuple(row.pending)))
            row.pending.clear()

    def _fail(self, request: Request, err: Exception, rows: Sequence[Row]) -> None:
        """End ``request`` alone: its ``rows`` are done (they leave the batch at the next drop) and it gets
        a :class:`Failed` event; every other request goes on."""
        log.error("request failed: %s: %s", type(err).__name__, err, exc_info=err)
        for row in rows:
            row.done = True
        _send(request, Failed(f"the request failed in the engine: {type(err).__name__}: {err}"))

    def _finish(self, row: Row, reason: str, final: str) -> None:
        if final or row.pending:
            _send(row.request, Piece(row.index, final, tuple(row.pending)))
            row.pending.clear()
        _send(row.request, Finished(row.index, reason, row.generated, tuple(row.stream.ids), tuple(row.logprobs)))
        row.done = True

    def _drop(self, gone: Callable[[Row], bool]) -> None:
        """Remove the rows ``gone`` selects from the batch, then trim leading all-padding columns."""
        keep = [i for i, row in enumerate(self._rows) if not gone(row)]
        if len(keep) == len(self._rows):
            return
        kept = set(keep)
        self.cancelled_rows += sum(
            1 for i, row in enumerate(self._rows) if i not in kept and row.request.cancelled and not row.done
        )
        if not keep:
            self._clear()
            return
        index = torch.tensor(keep, device=self._device)
        self._rows = [self._rows[i] for i in keep]
        self._generators = generators_of(self._rows)
        assert self._cache is not None and self._sampler is not None
        self._cache.reorder(index)
        self._sampler.keep(index)
        self._mask = trim_left(self._cache, self._mask.index_select(0, index))
        self._pending = self._pending.index_select(0, index)

    def _clear(self) -> None:
        self._rows, self._cache, self._sampler, self._generators = [], None, None, []
        self._mask = self._mask[:0, :0]
        self._pending = self._pending[:0]

    def _fail_all(self, message: str) -> None:
        requests = {id(row.request): row.request for row in self._rows if not row.done}
        self._clear()
        for request in requests.values():
            _send(request, Failed(message))


def _fail_all_of(requests: list[Request], err: Exception) -> None:
    for request in requests:
        _send(request, Failed(f"the engine failed: {type(err).__name__}: {err}"))


def _send(request: Request, event: Event) -> None:
    try:
        request.sink(event)
    except Exception:  # a sink that fails (its event loop closed) must not stop the engine
        log.debug("could not deliver %r", event, exc_info=True)
