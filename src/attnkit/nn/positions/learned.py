"""``"learned"``: a learned embedding per position, added to the embeddings (GPT-2, BERT).

The kind is :class:`attnkit.nn.LearnedPositionalEncoding` itself (parameter ``embedding.weight``).
"""

from attnkit.nn.positional import LearnedPositionalEncoding
from attnkit.nn.positions.base import POSITIONS

POSITIONS.add("learned", LearnedPositionalEncoding)
