"""Blocks and stacks (kept for ``attnkit.nn.transformer`` imports): see :mod:`attnkit.nn.blocks`,
:mod:`attnkit.nn.stacks` and :mod:`attnkit.nn.specs`."""

from attnkit.nn.blocks import DecoderBlock, DecoderCache, EncoderBlock, LayerCache
from attnkit.nn.specs import BlockSpec, StackSpec
from attnkit.nn.stacks import TransformerDecoder, TransformerEncoder

__all__ = [
    "BlockSpec",
    "DecoderBlock",
    "DecoderCache",
    "EncoderBlock",
    "LayerCache",
    "StackSpec",
    "TransformerDecoder",
    "TransformerEncoder",
]
