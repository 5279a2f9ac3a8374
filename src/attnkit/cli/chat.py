"""``attnkit chat``: an interactive conversation with a model in the terminal."""

from __future__ import annotations

import sys

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main, sampling_options, warn
from attnkit.config import UserPath

COMMANDS = "/reset forgets the conversation, /exit (or end of input) leaves"


@main.command()
@click.argument("run", type=UserPath())
@click.option("--system", help="A system message that starts the conversation (kept when old turns are dropped).")
@click.option("--max-new-tokens", default=256, show_default=True, type=click.IntRange(min=1), help="Reply length cap.")
@sampling_options
def chat(
    run: str,
    system: str | None,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    repetition_penalty: float,
    seed: int | None,
) -> None:
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
    """
    interactive = sys.stdin.isatty()
    try:
        session = api.ChatSession(
            api.load_model(run),
            system=system,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
            seed=seed,
        )
    except USER_ERRORS as err:
        fail(err)
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
