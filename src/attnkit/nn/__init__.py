"""Transformer building blocks in pure PyTorch (no Lightning, data or CLI code).

Shapes are batch-first (``[B, T, D]``); attention weights are ``[B, H, Tq, Tk]``; boolean masks
mean **True = may attend**. Blocks and stacks are built from specs (:class:`BlockSpec`,
:class:`StackSpec`); kinds are registered by name (:data:`ACTIVATIONS`, :data:`NORMS`,
:data:`POSITIONS`, each an :class:`attnkit.registry.Registry`), all on import of this package.
"""

from attnkit.nn.attention import KVCache, MultiHeadAttention, attend, scaled_dot_product_attention
from attnkit.nn.blocks import DecoderBlock, DecoderCache, EncoderBlock, LayerCache
from attnkit.nn.feedforward import ACTIVATIONS, ActivationKind, FeedForward
from attnkit.nn.hooks import ActivationCache, HookPoint, hook_points, run_with_cache
from attnkit.nn.losses import IGNORE_INDEX, linear_cross_entropy
from attnkit.nn.masks import (
    PreparedAttention,
    alibi_bias,
    band_mask,
    causal_mask,
    combine_masks,
    document_mask,
    document_positions,
    expand_attention_mask,
    finalize_mask,
    padding_mask,
    padding_mask_from_ids,
    positions_from_padding_mask,
    prepare_attention,
)
from attnkit.nn.normalization import NORMS, OffsetRMSNorm, RMSNorm, make_norm
from attnkit.nn.positional import (
    LearnedPositionalEncoding,
    PositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
    rope_inv_freq,
    sinusoidal_encoding,
)
from attnkit.nn.positions import POSITIONS, attention_positions, embedding_positions
from attnkit.nn.specs import BlockSpec, StackSpec
from attnkit.nn.stacks import TransformerDecoder, TransformerEncoder
from attnkit.registry import Registry

__all__ = [
    "ACTIVATIONS",
    "IGNORE_INDEX",
    "NORMS",
    "POSITIONS",
    "ActivationCache",
    "ActivationKind",
    "BlockSpec",
    "DecoderBlock",
    "DecoderCache",
    "EncoderBlock",
    "FeedForward",
    "HookPoint",
    "KVCache",
    "LayerCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "OffsetRMSNorm",
    "PositionalEncoding",
    "PreparedAttention",
    "RMSNorm",
    "Registry",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "StackSpec",
    "TransformerDecoder",
    "TransformerEncoder",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "attend",
    "attention_positions",
    "band_mask",
    "causal_mask",
    "combine_masks",
    "document_mask",
    "document_positions",
    "embedding_positions",
    "expand_attention_mask",
    "finalize_mask",
    "hook_points",
    "linear_cross_entropy",
    "make_norm",
    "padding_mask",
    "padding_mask_from_ids",
    "positions_from_padding_mask",
    "prepare_attention",
    "rope_inv_freq",
    "run_with_cache",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
