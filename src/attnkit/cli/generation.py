"""Commands that write text with a trained run: ``generate`` and ``translate``."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, SamplingCommand, fail, main, warn
from attnkit.config import UserPath

if TYPE_CHECKING:
    from attnkit.api.generation import SamplingParams


@main.command(cls=SamplingCommand, max_tokens=200)
@click.argument("run", type=UserPath())
@click.option("--prompt", default="", help="Text to continue (default: empty, i.e. a new document).")
@click.option("--file", "input_file", type=UserPath(dir_okay=False), help="Continue every line ('-': stdin).")
@click.option("--out", "output_file", type=UserPath(dir_okay=False), help="With --file: write the texts here.")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Prompts per batch.")
@click.option("--num-samples", default=1, show_default=True, type=click.IntRange(min=1), help="Texts per prompt.")
def generate(
    run: str,
    prompt: str,
    input_file: str | None,
    output_file: str | None,
    batch_size: int,
    num_samples: int,
    params: SamplingParams,
) -> None:
    """Generate text with an lm RUN (a run folder or checkpoint file), printed as it comes.

    With --file, every line is a prompt: the prompts are generated in batches and each text is
    written on one line (its line breaks written as \\n), to --out or the standard output.

    \b
      attnkit generate runs/lm/20261122-101500 --prompt "The old owl" --seed 1
      attnkit generate RUN --temperature 0 --max-new-tokens 50     # greedy, from an empty prompt
      attnkit generate RUN --file prompts.txt --out texts.txt --batch-size 16 --stop "."

    The sampling flags are the fields of attnkit's one SamplingParams (the server's request takes the
    same): each flag's help says what it does.
    """

    def write(text: str) -> None:
        click.echo(text, nl=False)
        sys.stdout.flush()

    generate_with = functools.partial(api.generate, run, params=params, num_samples=num_samples)
    try:
        if output_file is not None and input_file is None:
            raise ValueError("--out goes with --file (a single --prompt is printed as it is generated)")
        if input_file is None:
            generate_with(prompt, write=write)
            return
        prompts = api.read_lines(input_file)
        if not prompts:
            raise ValueError(f"{input_file} has no lines: write one prompt per line")
        texts = generate_with(prompts, batch_size=batch_size)
        lines = "".join(text.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for text in texts)
        if output_file is not None:
            Path(output_file).write_text(lines, encoding="utf-8")
        else:
            click.echo(lines, nl=False)
    except USER_ERRORS as err:
        fail(err)


@main.command()
@click.argument("run", type=UserPath())
@click.argument("texts", nargs=-1)
@click.option("--file", "input_file", type=UserPath(dir_okay=False), help="Translate every line ('-': stdin).")
@click.option("--out", "output_file", type=UserPath(dir_okay=False), help="Write the translations here.")
@click.option("--beam", type=int, help="Beam size; 1 = greedy (default: the run's decode.beam_size).")
def translate(
    run: str, texts: tuple[str, ...], input_file: str | None, output_file: str | None, beam: int | None
) -> None:
    """Translate TEXTS and/or the lines of --file with a translate RUN: one translation per line.

    \b
      attnkit translate runs/translate/20261122-101500 "three hundred twenty-one"
      attnkit translate RUN --file in.txt --out out.txt --beam 1
    """
    try:
        lines = list(texts) + (api.read_lines(input_file) if input_file else [])
        if not lines:
            raise ValueError("nothing to translate: pass texts as arguments or with --file")
        out = api.translate(run, lines, beam_size=beam, warn=warn)
        if output_file:
            Path(output_file).write_text("".join(f"{line}\n" for line in out), encoding="utf-8")
        else:
            for line in out:
                click.echo(line)
    except USER_ERRORS as err:
        fail(err)
