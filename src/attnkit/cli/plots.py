"""Commands that draw: ``plot attention|positional|schedule|curves`` and ``report``."""

from __future__ import annotations

import click

from attnkit import api
from attnkit.cli.common import OUT_HELP, PLOT_ERRORS, fail, main
from attnkit.config import UserPath


@main.group()
def plot() -> None:
    """Plot attention maps, positional encodings, learning-rate schedules and training curves."""


@plot.command("attention")
@click.argument("run", type=UserPath())
@click.option("--input", "text", help="An input written as for `attnkit predict` (e.g. '3 1 4 1 5').")
@click.option("--index", type=int, help="A validation example (default 0 when no --input).")
@click.option("--out", default="attention.png", show_default=True, help=OUT_HELP % "attention.png")
def plot_attention(run: str, text: str | None, index: int | None, out: str) -> None:
    """Attention maps of RUN for one input: layers as rows, heads as columns."""
    try:
        click.echo(f"wrote {api.plot_attention(run, out, text=text, index=index)}")
    except PLOT_ERRORS as err:
        fail(err)


@plot.command("positional")
@click.option("--dim", default=48, show_default=True, help="Hidden dimension of the encoding.")
@click.option("--length", default=96, show_default=True, help="Number of positions.")
@click.option("--curves", default=4, show_default=True, help="Curves of the first dimensions drawn below.")
@click.option("--out", default="positional.png", show_default=True, help=OUT_HELP % "positional.png")
def plot_positional(dim: int, length: int, curves: int, out: str) -> None:
    """The sinusoidal positional encoding: heat map over position × dimension, and its first dimensions."""
    try:
        click.echo(f"wrote {api.plot_positional(dim, length, out, curves=curves)}")
    except PLOT_ERRORS as err:
        fail(err)


@plot.command("schedule")
@click.argument("run", type=UserPath(), required=False)
@click.option("--warmup", type=int, default=50, show_default=True, help="Warm-up steps (without RUN).")
@click.option("--max-iters", type=int, help="Steps of the cosine period (without RUN; required then).")
@click.option("--lr", type=float, help="Base learning rate (without RUN; default: plot the factor).")
@click.option("--out", default="schedule.png", show_default=True, help=OUT_HELP % "schedule.png")
def plot_schedule(run: str | None, warmup: int, max_iters: int | None, lr: float | None, out: str) -> None:
    """The learning-rate schedule for --warmup and --max-iters, or the learning rate RUN logged."""
    try:
        click.echo(f"wrote {api.plot_schedule(run, out, warmup=warmup, max_iters=max_iters, lr=lr)}")
    except PLOT_ERRORS as err:
        fail(err)


@plot.command("curves")
@click.argument("run", type=UserPath())
@click.option("--out", default="curves.png", show_default=True, help=OUT_HELP % "curves.png")
def plot_curves(run: str, out: str) -> None:
    """Training curves of RUN: loss and metrics, train and validation."""
    try:
        click.echo(f"wrote {api.plot_curves(run, out)}")
    except PLOT_ERRORS as err:
        fail(err)


@main.command()
@click.argument("run", type=UserPath())
@click.option("--examples", default=3, show_default=True, help="Validation examples whose attention is shown.")
@click.option("--out", help="Where to write (default: RUN/report.html).")
def report(run: str, examples: int, out: str | None) -> None:
    """(Re)write RUN/report.html: config, metrics, curves and attention maps in one offline file."""
    try:
        click.echo(f"wrote {api.report(run, num_examples=examples, out=out)}")
    except PLOT_ERRORS as err:
        fail(err)
