"""Decoder-only (language model) incremental decoding and the sampling loop.

:class:`CausalDecoding` is the :class:`~attnkit.models.generation.search.Decoding` of a decoder-only
model over a batch of left-padded prompts: the key/value cache while the text fits the context, a
sliding window past it. :func:`sample` draws tokens from any decoding (temperature, top-k/p, min-p,
repetition penalty, per-row EOS and stop strings), one step at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnkit.models.generation.sampling import apply_repetition_penalty, sample_next_token
from attnkit.models.generation.search import Decoding
from attnkit.nn import DecoderCache

__all__ = ["CausalDecoding", "LastLogits", "check_left_padding", "check_stop_strings", "sample", "seen_tokens"]

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


def seen_tokens(prompt: Tensor, padding_mask: Tensor | None, vocab_size: int) -> Tensor:
    """``[B, V]`` True at the ids in each row of ``prompt [B, T]`` (padding, where ``padding_mask`` is
    False, excluded): the tokens a repetition penalty starts from."""
    seen = torch.zeros(prompt.shape[0], vocab_size, dtype=torch.bool, device=prompt.device)
    real = torch.ones_like(prompt, dtype=torch.bool) if padding_mask is None else padding_mask
    seen.scatter_(1, prompt.masked_fill(~real, 0), real)  # padding writes False at id 0: a no-op
    seen[:, 0] |= (prompt == 0).logical_and(real).any(dim=1)
    return seen


@torch.no_grad()
def sample(
    decoding: Decoding,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
    repetition_penalty: float = 1.0,
    seen: Tensor | None = None,
    stop_at_eos: bool = True,
    stop_ids: Sequence[int] | None = None,
    stop_strings: Sequence[str] | None = None,
    decode: Callable[[list[int]], str] | None = None,
    on_token: Callable[[Tensor], None] | None = None,
) -> Tensor:
    """Draw up to ``max_new_tokens`` (>= 1) tokens per row of ``decoding`` -> ``[B, n]``.

    Each step: the logits of every row, the repetition penalty (``seen [B, V]``: the ids already in
    each row, updated here; see :func:`seen_tokens`), then :func:`sample_next_token` with the sampling
    arguments (``temperature=0`` is greedy). A row that produced ``eos_id`` (with ``stop_at_eos``) or
    one of ``stop_ids`` (e.g. a chat template's end-of-turn token), or whose new text, ``decode(ids)``,
    contains one of ``stop_strings`` gets ``pad_id`` afterwards; sampling stops when every row has
    stopped. ``on_token`` receives each step's tokens ``[B]``.
    """
    stop = (list(stop_strings), decode) if stop_strings and decode is not None else None
    logits = decoding.logits()
    batch = logits.shape[0]
    out = torch.full((batch, max_new_tokens), decoding.pad_id, dtype=torch.long, device=logits.device)
    penalise = seen is not None and repetition_penalty != 1.0
    ends = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=logits.device) if stop_ids else None
    stopping = stop_at_eos or stop is not None or ends is not None
    finished = torch.zeros(batch, dtype=torch.bool, device=logits.device)
    end = 0
    for step in range(max_new_tokens):
        if penalise and seen is not None:
            logits = apply_repetition_penalty(logits, seen, repetition_penalty)
        token = sample_next_token(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, generator=generator
        )
        if stopping:
            token = token.masked_fill(finished, decoding.pad_id)
            if stop_at_eos:
                finished |= token == decoding.eos_id
            if ends is not None:
                finished |= torch.isin(token, ends)
        out[:, end] = token
        end += 1
        if penalise and seen is not None:
            seen.scatter_(1, token[:, None], True)
        if stop is not None:
            _finish_at_stop_strings(out[:, :end], finished, *stop)
        if on_token is not None:
            on_token(token)
        if step == max_new_tokens - 1 or (stopping and bool(finished.all())):
            break
        decoding.append(token)
        logits = decoding.logits()
    return out[:, :end]


def _finish_at_stop_strings(
    new_tokens: Tensor, finished: Tensor, stop_strings: list[str], decode: Callable[[list[int]], str]
) -> None:
    """Mark as finished the rows whose new text contains a stop string."""
    for row in (~finished).nonzero().flatten().tolist():
        text = decode(new_tokens[row].tolist())
        if any(s in text for s in stop_strings):
            finished[row] = True
