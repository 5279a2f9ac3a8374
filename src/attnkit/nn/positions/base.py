"""The registry of positional encodings, and which part of a stack's encoding the model and the stack build.

Every kind is a :class:`attnkit.nn.PositionalEncoding` subclass registered in :data:`POSITIONS` (the one
mechanism behind additive and in-attention positions; see its hooks). A new kind is one new file in
``attnkit/nn/positions/`` (every module there is imported with :mod:`attnkit.nn`) that subclasses
:class:`PositionalEncoding` and decorates it with ``@POSITIONS.register("name")``; model configs
accept the name at once.
"""

from __future__ import annotations

from attnkit.nn.positional import PositionalEncoding
from attnkit.nn.specs import StackSpec
from attnkit.registry import Registry

__all__ = ["POSITIONS", "PositionalEncoding", "attention_positions", "embedding_positions"]

POSITIONS: Registry[type[PositionalEncoding]] = Registry("positional encoding")
"""The positional encodings by name: ``"learned"``, ``"sinusoidal"``, ``"rotary"``, ``"alibi"``, ``"none"``."""


def embedding_positions(spec: StackSpec) -> PositionalEncoding | None:
    """The model's part of ``spec.positional``: the kind built, when it adds to the embeddings; else ``None``."""
    kind = POSITIONS.get(spec.positional)
    return kind.from_spec(spec) if kind.adds_to_embeddings else None


def attention_positions(spec: StackSpec) -> PositionalEncoding | None:
    """The stack's part of ``spec.positional``: the kind built, when it acts in attention; else ``None``."""
    kind = POSITIONS.get(spec.positional)
    return kind.from_spec(spec) if kind.acts_in_attention else None
