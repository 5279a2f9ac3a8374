"""Serving a language model over HTTP with an OpenAI-compatible API (``attnkit serve``).

- :func:`create_app`: the FastAPI app (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
  streamed or not; ``/health``) for an :class:`attnkit.interop.Pretrained` decoder.
- :class:`Engine`: the continuous-batching decoder behind it (one background thread, one batch;
  requests join at the next step), usable without HTTP: :meth:`Engine.submit` a prompt's ids with
  :class:`SamplingParams` and a callback that receives :class:`Piece` / :class:`Finished` /
  :class:`Failed` events.

Needs the ``serve`` extras (FastAPI, uvicorn) for the app; the engine needs only torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnkit.serve.engine import Engine, Event, Failed, Finished, Piece, Request, SamplingParams

if TYPE_CHECKING:
    from attnkit.serve.app import create_app

__all__ = ["Engine", "Event", "Failed", "Finished", "Piece", "Request", "SamplingParams", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":  # FastAPI only when the app is built
        from attnkit.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'attnkit.serve' has no attribute {name!r}")
