"""``attnkit chat``: an interactive conversation with a model in the terminal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, SamplingCommand, fail, flag_message, main, warn
from attnkit.config import UserPath

if TYPE_CHECKING:
    from attnkit.api.generation import SamplingParams

COMMANDS = "/reset forgets the conversation, /exit (or end of input) leaves"


@main.command(cls=SamplingCommand, max_tokens=256)
@click.argument("run", type=UserPath())
@click.option("--system", help="A system message that starts the conversation (kept when old turns are dropped).")
def chat(run: str, system: str | None, params: SamplingParams) -> None:
    """Chat with RUN: an lm run, an attnkit model folder or a Hugging Face folder of a decoder.

    Each line you type is a message; the reply is printed as it is generated, and the conversation
    is kept (formatted with the model's chat template, or attnkit's default one). When it outgrows
    the model's context the oldest turns are dropped, and the chat says so. /reset forgets the
    conversation, /exit leaves. Reads the standard input when it is not a terminal, so a
    conversation can be scripted: one message per line, one reply per line (its line breaks written
    as \\n, backslashes doubled).

    \b
      attnkit chat models/smollm2-instruct --system "Answer briefly." --temperature 0
      printf 'Hi\\nWhat is 2+2?\\n' | attnkit chat RUN --temperature 0

    The sampling flags are the fields of attnkit's one SamplingParams, as ``attnkit generate`` takes them;
    --max-new-tokens caps a reply (at least 1).
    """
    interactive = sys.stdin.isatty()
    try:
        session = api.ChatSession(run, system=system, params=params)  # checks params.max_tokens >= 1 first
    except USER_ERRORS as err:
        fail(ValueError(flag_message(err)))  # --max-new-tokens 0: named as its flag
    if interactive:
        click.secho(f"chatting with {run} ({COMMANDS})", fg="cyan", err=True)
    while True:
        if interactive:
            click.secho("> ", fg="green", nl=False, err=True)
        line = sys.stdin.readline()
        if not line:
            break
        text = line.rstrip("\n")
        if text.strip() == "/exit":
            break
        if text.strip() == "/reset":
            session.reset()
            click.secho("(conversation forgotten)", fg="cyan", err=True)
            continue
        if not text.strip():
            continue

        def write(piece: str) -> None:
            if not interactive:  # one reply per line: its line breaks written as \n (as generate --file)
                piece = piece.replace("\\", "\\\\").replace("\n", "\\n")
            click.echo(piece, nl=False)
            sys.stdout.flush()

        try:
            reply = session.send(text, on_text=write)
        except ValueError as err:
            warn(str(err))
            continue
        click.echo("")
        if reply.dropped:
            warn(f"dropped the {reply.dropped} oldest message(s) so the conversation fits the model's context")
