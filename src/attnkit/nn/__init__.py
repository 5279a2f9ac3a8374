"""Transformer building blocks in pure PyTorch (no Lightning, data or CLI code).

Shapes are batch-first (``[B, T, D]``); attention weights are ``[B, H, Tq, Tk]``; boolean masks
mean **True = may attend**.
"""

from attnkit.nn.attention import KVCache, MultiHeadAttention, attend, scaled_dot_product_attention
from attnkit.nn.feedforward import ACTIVATIONS, FeedForward
from attnkit.nn.masks import (
    PreparedAttention,
    band_mask,
    causal_mask,
    combine_masks,
    expand_attention_mask,
    finalize_mask,
    padding_mask,
    padding_mask_from_ids,
    positions_from_padding_mask,
    prepare_attention,
)
from attnkit.nn.normalization import NORMS, RMSNorm, make_norm
from attnkit.nn.positional import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
    rope_inv_freq,
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
    "NORMS",
    "DecoderBlock",
    "DecoderCache",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "PreparedAttention",
    "RMSNorm",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TransformerDecoder",
    "TransformerEncoder",
    "alibi_slopes",
    "apply_rotary",
    "attend",
    "band_mask",
    "causal_mask",
    "combine_masks",
    "expand_attention_mask",
    "finalize_mask",
    "make_norm",
    "padding_mask",
    "padding_mask_from_ids",
    "positions_from_padding_mask",
    "prepare_attention",
    "rope_inv_freq",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
