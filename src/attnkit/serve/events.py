"""What the serving engine tells a request: its :data:`Event` s, and the log-probabilities they carry.

:class:`~attnkit.serve.engine.Engine` calls a request's ``sink`` with, in order: a :class:`Prompt` (only when the
request asked for its prompt's log-probabilities), then, per choice, :class:`Piece` s of text and one
:class:`Finished`; or a single :class:`Failed` that ends the request (every choice).

Log-probabilities are the model's own: the log-softmax of its logits (float32), before any sampling option
changes them, as OpenAI and vLLM report them (:class:`TokenLogprob`, from
:mod:`attnkit.models.generation.logprobs`). A choice's Pieces carry the entries of its tokens in order; their
concatenation is its ``Finished.logprobs``: one entry per id of ``Finished.ids``, then one for the stop id that
ended the choice, if one did (OpenAI and vLLM report it; lm-eval's ``local-completions`` scores with it).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnkit.models.generation.logprobs import TokenLogprob

__all__ = ["Event", "Failed", "Finished", "Piece", "Prompt", "TokenLogprob"]


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
