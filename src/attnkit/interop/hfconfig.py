"""Turning the errors of reading a Hugging Face ``config.json`` into :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from attnkit.errors import ConfigError

__all__ = ["reading_config"]


@contextmanager
def reading_config(source: str, family: str) -> Iterator[None]:
    """A key missing from the config (``KeyError``), a value attnkit's config refuses (pydantic's
    ``ValidationError``, a ``ValueError``) or one of the wrong type (``TypeError``, ...: ``null // 2``)
    inside the block becomes a :class:`ConfigError` naming ``source`` and the model ``family``; a
    :class:`ConfigError` passes unchanged."""
    try:
        yield
    except ConfigError:
        raise
    except KeyError as err:
        raise ConfigError(f"{source}: {family} config has no {err.args[0]!r}") from None
    except ValueError as err:
        raise ConfigError(f"{source}: invalid {family} config: {err}") from None
    except (TypeError, AttributeError, ArithmeticError) as err:  # e.g. a list or null where a number goes
        raise ConfigError(
            f"{source}: invalid {family} config: a value of the wrong type or out of range ({type(err).__name__}: "
            f"{err}); compare it with the model's original config.json"
        ) from None
