"""``"none"``: no positions (a permutation-equivariant encoder, as the set-anomaly task needs)."""

from __future__ import annotations

from attnkit.nn.positional import PositionalEncoding
from attnkit.nn.positions.base import POSITIONS


@POSITIONS.register("none")
class NoPositions(PositionalEncoding):
    """Every hook is the base class's no-op."""
