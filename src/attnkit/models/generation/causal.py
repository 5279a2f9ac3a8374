"""Decoder-only (language model) incremental decoding and the sampling loop.

:class:`CausalDecoding` is the :class:`~attnkit.models.generation.search.Decoding` of a decoder-only
model over a batch of left-padded prompts: the key/value cache while the text fits the context, a
sliding window past it. :func:`sample` draws tokens from any decoding with a
:class:`~attnkit.models.generation.params.SamplingParams` (every option, per-row EOS, stop ids and stop
strings), one step at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnkit.models.generation.params import SamplingParams
from attnkit.models.generation.processors import Sampler
from attnkit.nn import DecoderCache

__all__ = ["CausalDecoding", "LastLogits", "check_left_padding", "check_stop_strings", "sample"]

LastLogits = Callable[[Tensor, Tensor | None, DecoderCache | None], Tensor]
"""``(ids [N, T], key_padding_mask [N, past + T] or None, cache or None)`` -> logits ``[N, V]`` of the
last position; with a cache, ``ids`` are only the new positions (their keys/values are appended)."""


class CausalDecoding:
    """The incremental decoding of a decoder-only model over left-padded prompts ``[N, T]``.

    ``last_logits`` runs the model (see :data:`LastLogits`); ``cache`` is an empty
    :class:`~attnkit.nn.DecoderCache` (``None``: recompute the whole context every step, same tokens).
    ``padding_mask [N, T]`` is True at real tokens (``None``: no padding). While the text fits
    ``context`` positions each step feeds the newest token through the cache; past it, each step
    re-encodes the last ``context`` tokens from position 0 (a sliding window, as nanoGPT crops its
    input). Room is kept for ``max_new_tokens`` appended tokens.
    """

    def __init__(
        self,
        last_logits: LastLogits,
        prompt: Tensor,
        padding_mask: Tensor | None,
        *,
        cache: DecoderCache | None,
        context: int,
        max_new_tokens: int,
        pad_id: int,
        eos_id: int,
    ) -> None:
        self.pad_id, self.eos_id = pad_id, eos_id
        self.banned: tuple[int, ...] = ()
        self._last_logits, self._cache, self._context = last_logits, cache, context
        batch, self.prompt_len = prompt.shape
        # One buffer for the prompt and every new token (and one for the mask): no concatenation per step.
        self._out = prompt.new_full((batch, self.prompt_len + max_new_tokens), pad_id)
        self._out[:, : self.prompt_len] = prompt
        self._mask = None
        if padding_mask is not None:
            self._mask = padding_mask.new_ones((batch, self.prompt_len + max_new_tokens))
            self._mask[:, : self.prompt_len] = padding_mask
        self._end = self.prompt_len
        self._started = False

    @property
    def tokens(self) -> Tensor:
        """``[N, T + n]``: the (left-padded) prompts and the ``n`` tokens appended so far."""
        return self._out[:, : self._end]

    @property
    def prompt_mask(self) -> Tensor | None:
        """``[N, T]``: True at the prompts' real tokens (``None``: no padding)."""
        return None if self._mask is None else self._mask[:, : self.prompt_len]

    def logits(self) -> Tensor:
        """Next-token logits ``[N, V]`` (call once after the start and once after each :meth:`append`)."""
        end, context, mask = self._end, self._context, self._mask
        if not self._started:
            self._started = True
            start = max(0, end - context)
            return self._last_logits(self._out[:, start:end], None if mask is None else mask[:, start:end], self._cache)
        window_mask = None if mask is None else mask[:, max(0, end - context) : end]
        if self._cache is not None and self._cache.length < context:
            return self._last_logits(self._out[:, end - 1 : end], window_mask, self._cache)
        self._cache = None  # past the context (or no cache): re-encode the last `context` tokens
        return self._last_logits(self._out[:, max(0, end - context) : end], window_mask, None)

    def append(self, tokens: Tensor) -> None:
        """Add ``tokens [N]``, one per row."""
        self._out[:, self._end] = tokens
        self._end += 1

    def reorder(self, rows: Tensor) -> None:
        """Keep rows ``rows [N]`` (tokens, mask and cache)."""
        self._out = self._out.index_select(0, rows)
        if self._mask is not None:
            self._mask = self._mask.index_select(0, rows)
        if self._cache is not None:
            self._cache.reorder(rows)


def check_left_padding(padding_mask: Tensor, shape: torch.Size) -> None:
    """Raise a ``ValueError`` unless ``padding_mask`` (True = real token) is a boolean tensor of ``shape``
    whose rows are left-padded (padding first, then at least one token)."""
    if padding_mask.dtype != torch.bool or padding_mask.shape != shape:
        raise ValueError(
            f"padding_mask must be a boolean tensor of the prompts' shape {tuple(shape)} (True = real token), "
            f"got {padding_mask.dtype} {tuple(padding_mask.shape)}"
        )
    if not bool(padding_mask[:, -1].all()) or bool((padding_mask[:, 1:] < padding_mask[:, :-1]).any()):
        raise ValueError(
            "prompts must be left-padded (padding first, then the tokens, and at least one token per row); "
            "pass a list of prompts to generate() to have them padded"
        )


def check_stop_strings(stop_strings: Sequence[str] | None, decode: Callable[[list[int]], str] | None) -> None:
    """Raise a ``ValueError`` unless ``stop_strings`` is ``None`` or non-empty strings with a ``decode``."""
    if stop_strings is None:
        return
    if isinstance(stop_strings, str) or not all(isinstance(x, str) and x for x in stop_strings):
        raise ValueError(f"stop_strings must be a list of non-empty strings, got {stop_strings!r}")
    if decode is None:
        raise ValueError("stop_strings need `decode` (token ids -> text), e.g. tokenizer.decode")


STOP_WINDOW_SLACK = 8  # tokens decoded beyond the longest stop string's length (module docstring of sample)


@torch.no_grad()
def sample(
    decoding: CausalDecoding,
    max_new_tokens: int,
    params: SamplingParams | None = None,
    *,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    stop_at_eos: bool = True,
    decode: Callable[[list[int]], str] | None = None,
    on_token: Callable[[Tensor], None] | None = None,
) -> Tensor:
    """Draw up to ``max_new_tokens`` (>= 1) tokens per row of ``decoding`` with ``params`` -> ``[B, n]``.

    Each step the :class:`~attnkit.models.generation.processors.Sampler` chooses every row's next token from
    the logits with ``params`` (default: :class:`SamplingParams`' defaults; its ``max_tokens`` and ``n`` are
    the caller's business) and ``generator`` (or one generator per row: each row draws alone, so its tokens do
    not depend on the other rows); the repetition penalty counts the prompt's tokens (padding
    excluded). A row that produced ``eos_id`` (with ``stop_at_eos``) or one of ``params.stop_ids`` (e.g. a chat
    template's end-of-turn token), or whose new text contains one of ``params.stop`` gets ``pad_id``
    afterwards; sampling stops when every row has stopped. ``on_token`` receives each step's tokens ``[B]``.

    Stop strings need ``decode`` (token ids -> text). They are looked for in the text of a row's last
    ``len(longest stop) + 8`` new tokens, decoded each step: a cost per token that does not grow with the
    text (a stop string of ``L`` characters that ends in the newest token starts within its last ``L``
    tokens, as every token but a few byte pieces decodes to at least one character; the 8 more tokens keep the
    window's first, possibly cut, characters away from it).
    """
    params = params if params is not None else SamplingParams()
    check_stop_strings(params.stop or None, decode)
    logits = decoding.logits()
    batch = logits.shape[0]
    sampler = Sampler(logits.shape[-1], logits.device)
    if generator is None or isinstance(generator, torch.Generator):
        sampler.add(params, decoding.tokens, padding_mask=decoding.prompt_mask, generator=generator)
    else:
        if len(generator) != batch:
            raise ValueError(f"sample: {len(generator)} generators for {batch} rows; give one per row (or one)")
        mask = decoding.prompt_mask
        for row, row_generator in enumerate(generator):
            rows = slice(row, row + 1)
            sampler.add(params, decoding.tokens[rows], padding_mask=None if mask is None else mask[rows],
                        generator=row_generator)  # fmt: skip
    out = torch.full((batch, max_new_tokens), decoding.pad_id, dtype=torch.long, device=logits.device)
    ends = (
        torch.tensor(sorted(set(params.stop_ids)), dtype=torch.long, device=logits.device) if params.stop_ids else None
    )
    stops = list(params.stop) if params.stop and decode is not None else None
    window = max(len(s) for s in stops) + STOP_WINDOW_SLACK if stops else 0
    stopping = stop_at_eos or stops is not None or ends is not None
    finished = torch.zeros(batch, dtype=torch.bool, device=logits.device)
    end = 0
    for step in range(max_new_tokens):
        token = sampler.choose(logits).tokens
        if stopping:
            token = token.masked_fill(finished, decoding.pad_id)
            if stop_at_eos:
                finished |= token == decoding.eos_id
            if ends is not None:
                finished |= torch.isin(token, ends)
        out[:, end] = token
        end += 1
        if stops is not None and decode is not None:
            start = max(0, end - window)
            for row in (~finished).nonzero().flatten().tolist():
                text = decode(out[row, start:end].tolist())
                if any(s in text for s in stops):
                    finished[row] = True
        if on_token is not None:
            on_token(token)
        if step == max_new_tokens - 1 or (stopping and bool(finished.all())):
            break
        decoding.append(token)
        logits = decoding.logits()
    return out[:, :end]
