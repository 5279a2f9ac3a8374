"""Serving a language model over HTTP with an OpenAI-compatible API (``attnkit serve``).

- :func:`create_app`: the FastAPI app (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
  streamed or not; ``/health``) for an :class:`attnkit.interop.Pretrained` decoder.
- :class:`Engine`: the continuous-batching decoder behind it (one background thread, one batch;
  requests join at the next step), usable without HTTP: :meth:`Engine.submit` a prompt's ids with
  :class:`SamplingParams` (:class:`attnkit.models.generation.SamplingParams`) and a callback that receives
  :class:`Prompt` / :class:`Piece` / :class:`Finished` / :class:`Failed` events (log-probabilities as
  :class:`TokenLogprob` s).
- :class:`ServeLimits`: what one request and the queue may hold (``attnkit serve``'s ``--max-*`` flags).

Needs the ``serve`` extras (FastAPI, uvicorn) for the app; the engine needs only torch. Names are imported
on first use: ``attnkit serve --help`` reads :class:`ServeLimits`' defaults without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnkit.serve.app import create_app
    from attnkit.serve.engine import (
        Engine,
        Event,
        Failed,
        Finished,
        Piece,
        Prompt,
        Request,
        SamplingParams,
        TokenLogprob,
    )
    from attnkit.serve.limits import ServeLimits

__all__ = [
    "Engine",
    "Event",
    "Failed",
    "Finished",
    "Piece",
    "Prompt",
    "Request",
    "SamplingParams",
    "ServeLimits",
    "TokenLogprob",
    "create_app",
]

HOMES = {
    **dict.fromkeys(
        ["Engine", "Event", "Failed", "Finished", "Piece", "Prompt", "Request", "SamplingParams", "TokenLogprob"],
        "attnkit.serve.engine",
    ),
    "ServeLimits": "attnkit.serve.limits",
    "create_app": "attnkit.serve.app",  # FastAPI only when the app is built
}


def __getattr__(name: str) -> Any:
    if name in HOMES:
        return getattr(importlib.import_module(HOMES[name]), name)
    raise AttributeError(f"module 'attnkit.serve' has no attribute {name!r}")
