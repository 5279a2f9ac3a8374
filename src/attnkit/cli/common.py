"""The ``attnkit`` command group and what its commands share: the user errors they report, how they
report them, and the handler that shows the library's log messages."""

from __future__ import annotations

import logging
import re
import sys
import typing
from typing import Any

import click

from attnkit.errors import CheckpointError, ConfigError

__all__ = [
    "OUT_HELP",
    "PLOT_ERRORS",
    "SAMPLING_FLAGS",
    "STANDARDIZED_HELP",
    "USER_ERRORS",
    "ClickHandler",
    "SamplingCommand",
    "fail",
    "flag_message",
    "main",
    "sampling_flags",
    "show_logs",
    "warn",
]

USER_ERRORS = (ConfigError, CheckpointError, ValueError, FileNotFoundError, TypeError)
PLOT_ERRORS = (*USER_ERRORS, NotImplementedError)
STANDARDIZED_HELP = "anomaly: the file's features are already standardised (default: raw; the run's mean/std apply)."
OUT_HELP = "Image file to write: .png or .svg (default: %s)."


SAMPLING_FLAGS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
)
"""The :class:`~attnkit.models.generation.SamplingParams` fields that ``generate`` and ``chat`` take as flags
(besides ``max_tokens``, their ``--max-new-tokens``)."""

# Flags whose name is not the field's: field -> (the flag's names; the first is the one errors name).
FLAG_NAMES = {"max_tokens": ("--max-new-tokens", "--max-tokens")}


class SamplingCommand(click.Command):
    """A command that generates text (``generate``, ``chat``): its sampling flags are derived from
    :class:`~attnkit.models.generation.SamplingParams`' fields (:data:`SAMPLING_FLAGS`, and ``max_tokens`` as
    ``--max-new-tokens`` with the command's ``max_tokens`` default): the flag's name from the field's, its
    default from the field's, its help from :func:`~attnkit.models.generation.field_doc`. The callback gets
    them as one ``params`` (a ``SamplingParams``), made (checked) before the callback runs: a wrong value is
    ``error: <the SamplingError's message>`` and exit code 2, before anything is written.

    The flags are made the first time the command's ``params`` are read (to parse, to show the help, by the
    documentation's sphinx-click), so that ``import attnkit.cli`` imports no torch."""

    def __init__(self, *args: Any, max_tokens: int = 16, **kwargs: Any) -> None:
        self.max_tokens = max_tokens
        self._derived: list[str] | None = None
        super().__init__(*args, **kwargs)

    @property  # click declares a plain attribute: this one derives the flags when first read
    def params(self) -> list[click.Parameter]:
        if self._derived is None:
            options = sampling_flags(self.max_tokens)
            self._derived = [str(o.name) for o in options]
            self._params.extend(options)
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value

    def invoke(self, ctx: click.Context) -> Any:
        from attnkit.api.generation import SamplingError, SamplingParams

        values = {name: ctx.params.pop(name) for name in self._derived or () if name in ctx.params}
        try:
            ctx.params["params"] = SamplingParams(**values)
        except SamplingError as err:
            fail(ValueError(flag_message(err)))
        return super().invoke(ctx)


def flag_message(err: Exception) -> str:
    """A :class:`~attnkit.models.generation.SamplingError`'s message in the command line's words: a field
    whose flag has another name (``max_tokens``: ``--max-new-tokens``) is named as the flag."""
    field = getattr(err, "field", None)
    if field not in FLAG_NAMES:
        return str(err)
    return re.sub(rf"\b{field}\b", FLAG_NAMES[field][0].removeprefix("--").replace("-", "_"), str(err))


def sampling_flags(max_tokens: int) -> list[click.Option]:
    """The flags of :data:`SAMPLING_FLAGS` and ``--max-new-tokens`` (default ``max_tokens``), derived from
    :data:`~attnkit.models.generation.FIELDS` (imports torch: called when a command parses its arguments)."""
    from attnkit.api.generation import FIELDS, SamplingParams, field_doc

    hints = typing.get_type_hints(SamplingParams)
    options = []
    for name in ("max_tokens", *SAMPLING_FLAGS):
        kinds = set(typing.get_args(hints[name])) or {hints[name]}  # `int | None`: {int, None}
        names = FLAG_NAMES.get(name, ("--" + name.replace("_", "-"),))
        default = max_tokens if name == "max_tokens" else FIELDS[name].default
        doc = field_doc(name)
        doc = doc[:1].upper() + doc[1:]
        if typing.get_origin(hints[name]) is tuple:  # a list (of strings): the flag is repeated
            option = click.Option([*names, name], multiple=True, type=str, help=f"{doc} (repeatable).")
        else:
            number = click.INT if int in kinds else click.FLOAT
            option = click.Option(
                [*names, name], type=number, default=default, show_default=default is not None, help=f"{doc}."
            )
        options.append(option)
    return options


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
