"""Transformer building blocks in pure PyTorch (no Lightning, data or CLI code).

Shapes are batch-first (``[B, T, D]``); attention weights are ``[B, H, Tq, Tk]``; boolean masks
mean **True = may attend**.
"""

from attnkit.nn.attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from attnkit.nn.feedforward import ACTIVATIONS, FeedForward
from attnkit.nn.masks import causal_mask, combine_masks, expand_attention_mask, padding_mask, padding_mask_from_ids
from attnkit.nn.positional import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)
from attnkit.nn.transformer import (
    DecoderBlock,
    DecoderCache,
    EncoderBlock,
    LayerCache,
    TransformerDecoder,
    TransformerEncoder,
)

__all__ = [
    "ACTIVATIONS",
    "DecoderBlock",
    "DecoderCache",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TransformerDecoder",
    "TransformerEncoder",
    "causal_mask",
    "combine_masks",
    "expand_attention_mask",
    "padding_mask",
    "padding_mask_from_ids",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
