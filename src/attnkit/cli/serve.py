"""``attnkit serve``: an OpenAI-compatible HTTP API for a model (FastAPI + uvicorn)."""

from __future__ import annotations

import os
import socket
import sys

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main
from attnkit.config import UserPath


@main.command()
@click.argument("run", type=UserPath())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option("--api-key", help="Requests need 'Authorization: Bearer KEY' (default: $ATTNKIT_API_KEY; none: open).")
@click.option(
    "--max-batch", default=32, show_default=True, type=click.IntRange(min=1), help="Most sequences decoded at once."
)
@click.option("--model-name", help="The model's name in the API (default: the folder's name).")
def serve(run: str, host: str, port: int, api_key: str | None, max_batch: int, model_name: str | None) -> None:
    """Serve RUN (an attnkit run, an attnkit model folder or a Hugging Face folder) with an
    OpenAI-compatible API: /v1/models, /v1/completions, /v1/chat/completions (streamed with
    "stream": true). Concurrent requests are decoded together (continuous batching). Ctrl-C stops it.

    \b
      attnkit serve ./SmolLM2-135M-Instruct --port 8000
      attnkit serve runs/lm/20261122-101500 --api-key secret --max-batch 16
    """
    try:
        import uvicorn

        from attnkit.serve import create_app
    except ImportError as err:
        fail(ImportError(f"{err}: attnkit serve needs FastAPI and uvicorn: pip install 'attnkit[serve]'"))
        return
    try:
        pretrained = api.load_model(run)
        key = api_key or os.environ.get("ATTNKIT_API_KEY") or None
        app = create_app(pretrained, model_name=model_name, api_key=key, max_batch=max_batch)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            sock.close()
            raise ValueError(f"cannot listen on {host}:{port}: {err.strerror} (choose another --port, or 0)") from None
    except (*USER_ERRORS, TypeError) as err:
        fail(err)
        return
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    name = model_name or pretrained.source.name
    click.echo(f"attnkit serve: {name} on http://{shown}:{bound}/v1 (Ctrl-C stops)")
    sys.stdout.flush()  # a process reading our stdout (a test, a supervisor) learns the port now
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
