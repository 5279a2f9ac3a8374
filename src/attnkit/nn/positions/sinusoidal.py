"""``"sinusoidal"``: the paper's fixed sinusoidal encoding, added to the embeddings.

The kind is :class:`attnkit.nn.SinusoidalPositionalEncoding` itself (a non-persistent table).
"""

from attnkit.nn.positional import SinusoidalPositionalEncoding
from attnkit.nn.positions.base import POSITIONS

POSITIONS.add("sinusoidal", SinusoidalPositionalEncoding)
