"""Serve a model over HTTP with the OpenAI-compatible API of :mod:`attnkit.serve` (FastAPI on uvicorn)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnkit.api.listening import listen_and_run
from attnkit.serve.limits import ServeLimits  # pydantic only (no torch, no FastAPI): the CLI's flags show its defaults

__all__ = ["ServeLimits", "serve"]


def serve(
    run: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_batch: int = 32,
    prefix_cache_mb: int = 256,
    model_name: str | None = None,
    limits: ServeLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the model ``run`` (an attnkit run, an attnkit model folder or a Hugging Face folder; see
    :func:`attnkit.api.load_model`) until interrupted: ``/v1/models``, ``/v1/completions`` and
    ``/v1/chat/completions`` (:func:`attnkit.serve.create_app`).

    ``host`` / ``port``: where to listen (127.0.0.1 by default; port 0 picks a free one); on a loopback
    address, requests whose ``Host`` header is not a loopback name are refused (421), so that web pages of
    other sites cannot drive the server. ``api_key`` (default: the ``ATTNKIT_API_KEY`` environment variable,
    which ``ps`` does not show): every request but ``GET /health`` without ``Authorization: Bearer KEY``
    gets 401. ``max_batch``: the most sequences decoded together. ``prefix_cache_mb``: memory for the keys and values
    of shared prompt prefixes (0: no prefix cache). ``model_name``: the model's name in the
    API (default: the folder's name). ``limits``: :class:`attnkit.serve.ServeLimits` (request size, prompts,
    characters, queue, ``max_tokens``; default: its defaults). ``on_ready`` receives the URL once the socket
    listens (with the real port)."""
    try:
        import uvicorn  # noqa: F401 -- needed by listen_and_run; checked before the model loads

        from attnkit.serve import create_app
        from attnkit.serve.guard import is_loopback
    except ImportError as err:
        raise ImportError(f"{err}: attnkit serve needs FastAPI and uvicorn: pip install 'attnkit[serve]'") from None
    from attnkit.api.models import load_model  # torch: once the server starts, not when `attnkit --help` runs

    pretrained = load_model(run)
    app = create_app(
        pretrained,
        model_name=model_name,
        api_key=api_key or None,
        max_batch=max_batch,
        prefix_cache_mb=prefix_cache_mb,
        limits=limits,
        local_only=is_loopback(host),
    )
    listen_and_run(app, host, port, path="/v1", on_ready=on_ready)
