"""The serving engine: one background thread decodes every live request as one batch (continuous batching).

:class:`Engine` owns a :class:`~attnkit.models.LanguageModel` and one
:class:`~attnkit.models.generation.batch.ContinuousBatch`, the decode loop (prefill, joining new rows into the
running batch's cache, one step for every live row with its request's
:class:`~attnkit.models.generation.SamplingParams` and seed, stop ids, log-probabilities, a request's failure kept
its own). The engine keeps the rest: :meth:`Engine.submit` queues a :class:`Request` (prompt ids, parameters, a
``sink`` that receives its :data:`~attnkit.serve.events.Event` s); the thread admits waiting requests into the
batch at the next step, in order, as many as ``max_batch`` rows allow, so a request never waits for the others
to finish; a cancelled request's rows leave at the next step; and each choice's tokens become streamed text, cut
at its stop strings, sent as :class:`Piece` and :class:`Finished` events.

Log-probabilities (``SamplingParams.logprobs``) ride on the :class:`Piece` and :class:`Finished` events; a
request submitted with ``prompt_logprobs`` first gets a :class:`Prompt` event (its prompt's log-probabilities,
from a log-softmax at every prompt position of its prefill), and with ``max_tokens`` 0 it ends there.

Every request fails alone: an error while handling one request (seeding its generator, choosing its tokens, in
the batch; decoding its text, stop strings, here) ends that request with a :class:`Failed` event and the batch
goes on (see :mod:`attnkit.models.generation.batch`). Only an error of the shared decoding step, or of joining a
prefill into the batch, fails every live row.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence

import torch

from attnkit.models import LanguageModel
from attnkit.models.generation import MAX_TOKENS, SamplingError, SamplingParams
from attnkit.models.generation.batch import BatchRow, ContinuousBatch, NewToken, Update
from attnkit.models.generation.prefix_cache import PrefixCache
from attnkit.serve.events import Event, Failed, Finished, Piece, Prompt, TokenLogprob
from attnkit.serve.rows import ChoiceText, Request
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
    of that prefix, and every prefill's prompt is kept there (echo requests fill it but never read it: they
    score every prompt position, and the cache holds keys and values, not logits). Start with :meth:`start`
    (or use as a context manager); :meth:`shutdown` stops the thread.
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
        self.prefix_cache = prefix_cache
        self._batch: ContinuousBatch[Request] = ContinuousBatch(
            model,
            int(model.config.vocab_size),
            context=self.context,
            stop_ids=self.stop_ids,
            device=next(model.parameters()).device,
            prefix_cache=prefix_cache,
        )
        self._waiting: deque[Request] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def steps(self) -> int:
        """Decoding steps so far (a request's first token comes from its prefill, not a step)."""
        return self._batch.steps

    @property
    def peak_rows(self) -> int:
        """The most rows decoded together so far (settable: a benchmark resets it)."""
        return self._batch.peak_rows

    @peak_rows.setter
    def peak_rows(self, value: int) -> None:
        self._batch.peak_rows = value

    @property
    def cancelled_rows(self) -> int:
        """Rows removed unfinished because their request was cancelled."""
        return self._batch.cancelled_rows

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
        vocab = self._batch.vocab_size
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
            "live_rows": len(self._batch.rows),
            "waiting": len(self._waiting),
            "width": self._batch.width,
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
                    while not self._stopping and not self._batch.rows and not self._waiting:
                        self._wake.wait()
                    if self._stopping:
                        break
                try:
                    self._admit()
                    if self._batch.rows:
                        self._handle(self._batch.step())
                        self._batch.drop()
                except Exception as err:  # a failed step fails its rows; the server keeps serving
                    log.exception("decoding step failed")
                    self._fail_all(f"the engine failed: {type(err).__name__}: {err}")
        self._fail_all("the server is shutting down")
        with self._wake:
            waiting, self._waiting = list(self._waiting), deque()
        for request in waiting:
            _send(request, Failed("the server is shutting down"))

    def _admit(self) -> None:
        """Hand the batch, together, the waiting requests that fit ``max_batch`` (in order; cancelled ones
        never), until none is left or fits."""
        self._batch.drop()  # the rows of requests cancelled since the last step
        while True:
            admitted: list[Request] = []
            with self._wake:
                rows = len(self._batch.rows)
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
            update = self._batch.admit(admitted)
            self._handle(update)
            if update.broken is not None:  # joining failed: the batch may be broken, _run fails its rows
                err, unjoined = update.broken
                for request in unjoined:
                    _send(request, Failed(f"the engine failed: {type(err).__name__}: {err}"))
                raise err
            self._batch.drop()

    def _handle(self, update: Update[Request]) -> None:
        """Send what the batch produced: prompts' log-probabilities, requests of ``max_tokens`` 0 done, failures,
        then each new token's text (a request that fails here fails alone)."""
        for request, entries in update.prompts:
            _send(request, Prompt(entries))
        for request in update.ended:
            for i in range(request.params.n):
                _send(request, Finished(i, "length", 0, ()))
        failed: set[int] = set()
        for request, err in update.failed:
            failed.add(id(request))
            self._fail(request, err)
        for new in update.tokens:
            request = new.row.request
            if request.cancelled or id(request) in failed:
                continue  # a failed request's row, or a cancelled one: leaves the batch at the next drop
            try:
                self._accept(new)
            except Exception as err:
                failed.add(id(request))
                self._batch.end(request)
                self._fail(request, err)

    def _accept(self, new: NewToken[Request]) -> None:
        """Record token ``new.id`` (and its log-probability entry) as the next of its row: emit its text, or end
        the choice (a stop id, a stop string, its length)."""
        row, request = new.row, new.row.request
        text = request.texts.get(row.index)
        if text is None:
            text = request.texts[row.index] = ChoiceText(StreamDecoder(self.tokenizer), StopText(request.params.stop))
        if new.logprob is not None:  # a stop id's too: OpenAI and vLLM report it, and lm-eval scores with it
            text.pending.append(new.logprob)
            text.logprobs.append(new.logprob)
        if new.end == "stop":  # a stop id
            self._finish(row, text, "stop", final=text.stops.flush(text.stream.flush()))
            return
        piece, stopped = text.stops.add(text.stream.push(new.id))
        if stopped:
            self._batch.end(request, row.index)
            self._finish(row, text, "stop", final=piece)
        elif new.end == "length":
            self._finish(row, text, "length", final=piece + text.stops.flush(text.stream.flush()))
        elif piece:
            _send(request, Piece(row.index, piece, tuple(text.pending)))
            text.pending.clear()

    def _fail(self, request: Request, err: Exception) -> None:
        """End ``request`` alone with a :class:`Failed` event (its rows are done); every other request goes on."""
        log.error("request failed: %s: %s", type(err).__name__, err, exc_info=err)
        _send(request, Failed(f"the request failed in the engine: {type(err).__name__}: {err}"))

    def _finish(self, row: BatchRow[Request], text: ChoiceText, reason: str, final: str) -> None:
        if final or text.pending:
            _send(row.request, Piece(row.index, final, tuple(text.pending)))
            text.pending.clear()
        _send(row.request, Finished(row.index, reason, row.generated, tuple(text.stream.ids), tuple(text.logprobs)))

    def _fail_all(self, message: str) -> None:
        for request in self._batch.clear():
            _send(request, Failed(message))


def _send(request: Request, event: Event) -> None:
    try:
        request.sink(event)
    except Exception:  # a sink that fails (its event loop closed) must not stop the engine
        log.debug("could not deliver %r", event, exc_info=True)
