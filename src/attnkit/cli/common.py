"""The ``attnkit`` command group and what its commands share: the user errors they report, how they
report them, and the handler that shows the library's log messages."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from attnkit.errors import CheckpointError, ConfigError

__all__ = [
    "OUT_HELP",
    "PLOT_ERRORS",
    "STANDARDIZED_HELP",
    "USER_ERRORS",
    "ClickHandler",
    "fail",
    "main",
    "sampling_options",
    "show_logs",
    "warn",
]

USER_ERRORS = (ConfigError, CheckpointError, ValueError, FileNotFoundError, TypeError)
PLOT_ERRORS = (*USER_ERRORS, NotImplementedError)
STANDARDIZED_HELP = "anomaly: the file's features are already standardised (default: raw; the run's mean/std apply)."
OUT_HELP = "Image file to write: .png or .svg (default: %s)."


F = TypeVar("F", bound=Callable[..., Any])

_SAMPLING = (
    click.option(
        "--temperature",
        default=1.0,
        show_default=True,
        type=float,
        help="0 = greedy, else >= 0.01; higher = more random.",
    ),
    click.option("--top-k", type=click.IntRange(min=1), help="Sample among the K most likely tokens only."),
    click.option("--top-p", type=float, help="Sample among the most likely tokens whose probability sums to P."),
    click.option("--min-p", type=float, help="Drop tokens less likely than P times the most likely one."),
    click.option(
        "--repetition-penalty", default=1.0, show_default=True, type=float, help="> 1 discourages repeating tokens."
    ),
    click.option("--seed", type=int, help="Seed the sampling, in [0, 2**64): the same seed gives the same text."),
)


def sampling_options(command: F) -> F:
    """The sampling flags a command that generates text takes (``generate``, ``chat``): ``--temperature``,
    ``--top-k``, ``--top-p``, ``--min-p``, ``--repetition-penalty`` and ``--seed``. Their values are checked by
    :func:`attnkit.models.generation.check_sampling` (the rules ``serve`` and ``explore`` share) before the
    command loads a model or writes anything."""
    for option in reversed(_SAMPLING):
        command = option(command)
    return command


def fail(err: Exception) -> None:
    """Report a user error (``error: ...`` in red on stderr) and exit with code 2."""
    click.secho(f"error: {err}", fg="red", err=True)
    sys.exit(2)


def warn(message: str) -> None:
    """``warning: ...`` in yellow on stderr."""
    click.secho(f"warning: {message}", fg="yellow", err=True)


class ClickHandler(logging.Handler):
    """Shows log records as the command line's own output: the message alone, INFO and below on
    stdout, WARNING and above on stderr (flushed at once, so worker processes interleave by line)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=record.levelno >= logging.WARNING)
            (sys.stderr if record.levelno >= logging.WARNING else sys.stdout).flush()
        except Exception:
            self.handleError(record)


def show_logs(name: str, level: int = logging.INFO) -> None:
    """Show the INFO (and more serious) messages of the library logger ``name`` (e.g.
    ``"attnkit.tuning"``) with a :class:`ClickHandler`, once, not passed on to the root logger."""
    logger = logging.getLogger(name)
    if not any(isinstance(h, ClickHandler) for h in logger.handlers):
        logger.addHandler(ClickHandler())
    logger.setLevel(level)
    logger.propagate = False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attnkit")
def main() -> None:
    """Build, train, inspect and tune Transformer models."""
