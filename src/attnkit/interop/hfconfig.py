"""Turning the errors of reading a Hugging Face ``config.json`` into :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from attnkit.errors import ConfigError

__all__ = ["reading_config"]


@contextmanager
def reading_config(source: str, family: str) -> Iterator[None]:
    """A key missing from the config (``KeyError``) or a value attnkit's config refuses (pydantic's
    ``ValidationError``, a ``ValueError``) inside the block becomes a :class:`ConfigError` naming
    ``source`` and the model ``family``; a :class:`ConfigError` passes unchanged."""
    try:
        yield
    except ConfigError:
        raise
    except KeyError as err:
        raise ConfigError(f"{source}: {family} config has no {err.args[0]!r}") from None
    except ValueError as err:
        raise ConfigError(f"{source}: invalid {family} config: {err}") from None
