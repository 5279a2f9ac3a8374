"""``attnkit serve``: an OpenAI-compatible HTTP API for a model (FastAPI + uvicorn)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
from pydantic import ValidationError

from attnkit import api
from attnkit.api.serving import ServeLimits
from attnkit.cli.common import USER_ERRORS, fail, main
from attnkit.config import UserPath


def limit_options(command: Callable[..., None]) -> Callable[..., None]:
    """One ``--max-...`` flag per :class:`ServeLimits` field (its default and description; pydantic only: no
    torch at start-up), in the fields' order."""
    for name, field in reversed(ServeLimits.model_fields.items()):
        flag = "--" + name.replace("_", "-")
        option = click.option(
            flag, default=field.default, show_default=True, type=click.IntRange(min=1), help=field.description
        )
        command = option(command)
    return command


@main.command()
@click.argument("run", type=UserPath())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option(
    "--api-key",
    help="Every request but GET /health needs 'Authorization: Bearer KEY' (default: $ATTNKIT_API_KEY, which ps "
    "does not show: prefer it; none: open).",
)
@click.option(
    "--max-batch", default=32, show_default=True, type=click.IntRange(min=1), help="Most sequences decoded at once."
)
@click.option(
    "--prefix-cache-mb",
    default=256,
    show_default=True,
    type=click.IntRange(min=0),
    help="MiB kept of the keys and values of prompt prefixes (a system prompt, few-shot examples, a chat's "
    "history) that later requests starting the same way reuse instead of prefilling again; 0: off.",
)
@click.option("--model-name", help="The model's name in the API (default: the folder's name).")
@limit_options
def serve(
    run: str,
    host: str,
    port: int,
    api_key: str | None,
    max_batch: int,
    prefix_cache_mb: int,
    model_name: str | None,
    **limits: int,
) -> None:
    """Serve RUN (an attnkit run, an attnkit model folder or a Hugging Face folder) with an
    OpenAI-compatible API: /v1/models, /v1/completions, /v1/chat/completions (streamed with
    "stream": true). Concurrent requests are decoded together (continuous batching). Ctrl-C stops it.
    On 127.0.0.1 (the default) it answers only requests addressed to a loopback name.

    \b
      attnkit serve ./SmolLM2-135M-Instruct --port 8000
      ATTNKIT_API_KEY=secret attnkit serve runs/lm/20261122-101500 --max-batch 16
    """
    name = model_name or Path(run).name

    def ready(url: str) -> None:
        click.echo(f"attnkit serve: {name} on {url} (Ctrl-C stops)")
        sys.stdout.flush()  # a process reading our stdout (a test, a supervisor) learns the port now

    try:
        checked = ServeLimits(**limits)
    except ValidationError as err:
        fail(ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")))
    try:
        api.serve(
            run, host=host, port=port, api_key=api_key, max_batch=max_batch, prefix_cache_mb=prefix_cache_mb,
            model_name=model_name,
            limits=checked, on_ready=ready,
        )  # fmt: skip
    except (*USER_ERRORS, ImportError) as err:
        fail(err)
