"""The serving engine's requests and the text state of each of their choices.

:class:`Request` is what :meth:`attnkit.serve.Engine.submit` queues; a request of ``n`` choices decodes as ``n``
rows of the engine's :class:`~attnkit.models.generation.batch.ContinuousBatch` (which reads its prompt, parameters
and ``cancelled``), and each choice's text (streamed, cut at stop strings) is kept in a :class:`ChoiceText`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from attnkit.models.generation import SamplingParams
from attnkit.serve.events import Event, TokenLogprob
from attnkit.text.stops import StopText
from attnkit.text.streaming import StreamDecoder

__all__ = ["ChoiceText", "Request"]


@dataclass(eq=False)
class ChoiceText:
    """One choice's text so far (``stream``, ``stops``) and its log-probability entries (``pending``: not sent
    in a Piece yet; ``logprobs``: one per id of its text, then the stop id's)."""

    stream: StreamDecoder
    stops: StopText
    pending: list[TokenLogprob] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)


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
    texts: dict[int, ChoiceText] = field(default_factory=dict, repr=False)  # by choice, from its first token

    def cancel(self) -> None:
        """Stop decoding this request (e.g. its client went away); its rows leave the batch at the next step."""
        self.cancelled = True
