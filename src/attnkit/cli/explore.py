"""``attnkit explore``: the attention explorer of a model in the browser."""

from __future__ import annotations

import sys

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main
from attnkit.config import UserPath


@main.command()
@click.argument("run", type=UserPath())
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
@click.option("--no-browser", is_flag=True, help="Print the URL only; open no browser.")
def explore(run: str, port: int, no_browser: bool) -> None:
    """Explore RUN's attention live (an attnkit run, an attnkit model folder or a Hugging Face folder): a
    local page on 127.0.0.1 where you type an input and watch every layer and head attend (head view,
    matrix, model view); for decoders the next-token distribution, a temperature slider and generation
    step by step. Works offline. Ctrl-C stops it.

    \b
      attnkit explore runs/lm/20261122-101500
      attnkit explore ./SmolLM2-135M --port 8765 --no-browser
    """

    def ready(url: str) -> None:
        click.echo(f"attnkit explore: {run} on {url} (Ctrl-C stops)")
        sys.stdout.flush()  # a process reading our stdout (a test) learns the port now

    try:
        api.explore(run, port=port, open_browser=not no_browser, on_ready=ready)
    except (*USER_ERRORS, ImportError) as err:
        fail(err)
