"""What one request, and all of them together, may ask of ``attnkit serve``: :class:`ServeLimits` (one
``attnkit serve`` flag each), and :class:`Admission`, which applies the ones checked before a request's
text is tokenized and before its prompts join the engine's queue."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import Field, model_validator

from attnkit.config import StrictModel

__all__ = ["Admission", "QueueFull", "ServeLimits", "TooMuchText"]

MIB = 1024 * 1024


class ServeLimits(StrictModel):
    """The server's limits (each is the ``attnkit serve`` flag of its name, dashes for underscores).

    - ``max_body_bytes``: the most bytes of a request body (more: 413, before the body is read whole).
    - ``max_prompts``: the most prompts of one completions request (more: 400 naming ``prompt``).
    - ``max_chars``: the most characters of text in one request, its prompts or its messages' contents
      together (more: 400 naming ``prompt`` or ``messages``, before tokenizing).
    - ``max_queue``: the most prompts waiting for room in the batch, the ones being tokenized included
      (a request that would pass it: 429 with ``Retry-After``); at least ``max_prompts``, so that every
      request that passes the limits above can be admitted.
    - ``max_tokens``: the most new tokens of one choice: a request asking more gets this many (its
      ``finish_reason`` then says ``"length"``), and it is chat's default ``max_tokens``.
    """

    max_body_bytes: int = Field(2 * MIB, ge=1, description="Most bytes of a request body (more: 413).")
    max_prompts: int = Field(64, ge=1, description="Most prompts of one completions request (more: 400).")
    max_chars: int = Field(
        100_000,
        ge=1,
        description="Most characters of one request's prompts or messages together (more: 400, before tokenizing).",
    )
    max_queue: int = Field(
        256,
        ge=1,
        description="Most prompts waiting for room in the batch (full: 429 with Retry-After); at least --max-prompts.",
    )
    max_tokens: int = Field(
        1024,
        ge=1,
        description="Most new tokens of one choice: a request asking more gets this many; chat's default max_tokens.",
    )

    @model_validator(mode="after")
    def _queue_holds_a_request(self) -> ServeLimits:
        if self.max_queue < self.max_prompts:
            raise ValueError(
                f"max_queue ({self.max_queue}) must be at least max_prompts ({self.max_prompts}): a request of "
                "max_prompts prompts could never be admitted (raise --max-queue or lower --max-prompts)"
            )
        return self

    def cap(self, max_tokens: int | None) -> int:
        """The ``max_tokens`` a request gets: what it asks, at most :attr:`max_tokens` (none asked: that)."""
        return self.max_tokens if max_tokens is None else min(max_tokens, self.max_tokens)


class TooMuchText(ValueError):
    """A request's text is over a limit; ``param`` is the request field to name (``prompt``, ``messages``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class QueueFull(RuntimeError):
    """The queue has no room for a request's prompts (answered 429 with ``Retry-After``)."""


class Admission:
    """The checks of a request's text and the count of prompts between admission and the engine's queue.

    ``waiting`` tells how many prompts the engine holds that are not yet decoding. :meth:`check_texts`
    raises :class:`TooMuchText`; :meth:`reserve` raises :class:`QueueFull` or counts ``k`` prompts as
    queued until :meth:`release` (call it once they are submitted to the engine, or refused). Both run on
    the event loop, with no ``await`` between check and count, so concurrent requests cannot overbook.
    """

    def __init__(self, limits: ServeLimits, waiting: Callable[[], int]) -> None:
        self.limits, self.waiting, self.pending = limits, waiting, 0

    def check_texts(self, texts: Sequence[str], param: str) -> None:
        limits = self.limits
        if param == "prompt" and len(texts) > limits.max_prompts:
            raise TooMuchText(
                f"the request has {len(texts)} prompts, more than this server's limit of {limits.max_prompts} "
                "(attnkit serve --max-prompts): send them in several requests",
                param,
            )
        chars = sum(len(t) for t in texts)
        if chars > limits.max_chars:
            raise TooMuchText(
                f"the request's {param} hold {chars} characters, more than this server's limit of {limits.max_chars} "
                "(attnkit serve --max-chars): send less text",
                param,
            )

    def queued(self) -> int:
        """Prompts waiting: in the engine's queue, and admitted here but not yet handed to it."""
        return self.waiting() + self.pending

    def reserve(self, k: int) -> None:
        queued = self.queued()
        if queued + k > self.limits.max_queue:
            raise QueueFull(
                f"the server is busy: {queued} prompts are waiting and this request has {k}, over the queue's "
                f"limit of {self.limits.max_queue} (attnkit serve --max-queue): retry after the Retry-After seconds"
            )
        self.pending += k

    def release(self, k: int) -> None:
        self.pending -= k
