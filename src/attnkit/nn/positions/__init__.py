"""Positional encodings, one module per kind, registered in :data:`POSITIONS` (see :mod:`.base`).

Importing this package imports the built-in kinds (in the order configs list them: learned,
sinusoidal, rotary, alibi, none) and then every other module of the package, so that a new kind is
one new file here and nothing else.
"""

import importlib
import pkgutil

from attnkit.nn.positions.base import POSITIONS, PositionalEncoding, attention_positions, embedding_positions

_BUILT_IN = ("learned", "sinusoidal", "rotary", "alibi", "none")
_OTHERS = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in (*_BUILT_IN, "base"))
for _name in (*_BUILT_IN, *_OTHERS):
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["POSITIONS", "PositionalEncoding", "attention_positions", "embedding_positions"]
