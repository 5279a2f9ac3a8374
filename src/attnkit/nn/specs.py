"""Specs: what a block and a stack are made of, as frozen plain dataclasses (as litgpt's ``Config``).

:class:`BlockSpec` describes one encoder or decoder block; :class:`StackSpec` is a block spec plus the
stack's own fields (depth, final norm, positions, sliding window). Blocks and stacks are built from
a spec: ``TransformerEncoder(StackSpec(d_model=64, num_heads=4, num_layers=2))``. Kinds (``activation``,
``norm``, ``positional``) are names in :data:`attnkit.nn.ACTIVATIONS`, :data:`attnkit.nn.NORMS` and
:data:`attnkit.nn.POSITIONS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BlockSpec", "StackSpec"]


@dataclass(frozen=True)
class BlockSpec:
    """One Transformer block.

    Attributes:
        d_model: model width ``D``.
        num_heads: attention heads (must divide ``d_model`` unless ``head_dim`` is given).
        dim_feedforward: hidden width of the feed-forward network.
        dropout: dropout on attention weights, inside the feed-forward, and on each residual branch.
        activation: ``"relu"`` (paper), ``"gelu"``, ``"gelu_tanh"``, ``"swiglu"``, ``"geglu_tanh"``
            (:data:`ACTIVATIONS`).
        norm_first: pre-norm instead of the paper's post-norm.
        head_dim: per-head width (default ``d_model // num_heads``).
        bias: biases in the linear layers and LayerNorms.
        layer_norm_eps: the norms' epsilon.
        norm: ``"layernorm"``, ``"rmsnorm"`` or ``"rmsnorm_offset"`` (:data:`NORMS`).
        num_kv_heads: key/value heads of the self-attention (grouped-query; ``None`` = ``num_heads``).
        qkv_bias: biases of the query/key/value projections (``None`` = follow ``bias``).
        qk_norm: a norm of the block's kind over each head of the queries and of the keys, before
            rotary positions (QK-norm: ``q_norm`` / ``k_norm`` in the attention).
        attn_scale: the attention scores' scale (``None`` = ``head_dim ** -0.5``; Gemma's
            ``query_pre_attn_scalar ** -0.5``).
        sandwich_norm: pre-norm blocks only: a norm of each sublayer's output too, before its residual
            add (Gemma 2/3's ``post_attention_layernorm`` / ``post_feedforward_layernorm``:
            ``attn_out_norm`` / ``mlp_out_norm`` in the block).
        cross_attention: decoder blocks only: a cross-attention to the encoder memory (``False``: a
            GPT-style block for decoder-only language models).
        mlp: decoder blocks only: the feed-forward sublayer (``False``: an attention-only block, attention and
            residual alone, with no feed-forward and no norm before or after it; ``dim_feedforward`` and
            ``activation`` are then unused).
    """

    d_model: int
    num_heads: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    head_dim: int | None = None
    bias: bool = True
    layer_norm_eps: float = 1e-5
    norm: str = "layernorm"
    num_kv_heads: int | None = None
    qkv_bias: bool | None = None
    qk_norm: bool = False
    attn_scale: float | None = None
    sandwich_norm: bool = False
    cross_attention: bool = True
    mlp: bool = True

    @property
    def attention_head_dim(self) -> int:
        """``head_dim``, or ``d_model // num_heads`` when unset."""
        return self.head_dim if self.head_dim is not None else self.d_model // max(self.num_heads, 1)


@dataclass(frozen=True, kw_only=True)
class StackSpec(BlockSpec):
    """A stack of ``num_layers`` blocks (the block fields as :class:`BlockSpec`), and:

    Attributes:
        num_layers: number of blocks.
        final_norm: a norm after the last block; by default (``None``) on for pre-norm stacks (whose
            blocks leave their output un-normalised) and off for post-norm stacks.
        positional: the positional encoding, a name in :data:`attnkit.nn.POSITIONS`. The stack applies
            the kinds that act inside attention (``"rotary"``, ``"alibi"``); the kinds added to the
            embeddings (``"sinusoidal"``, ``"learned"``) are the model's (see
            :func:`attnkit.nn.embedding_positions`).
        max_len: the longest sequence (tables of learned/sinusoidal encodings).
        rope_theta: the rotary base.
        rope_scaling: a mapping ``{"type": "linear" | "dynamic" | "llama3", "factor": ...,
            "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}``, see
            :func:`attnkit.nn.positional.rope_inv_freq` (rotary positions only).
        sliding_window: each query attends to at most the last ``sliding_window`` keys, itself included.
        sliding_window_pattern: with ``sliding_window``, every ``sliding_window_pattern``-th layer (layers
            ``p - 1``, ``2p - 1``, ...) is global, attending to every key; the others slide (Gemma 3: 6).
            ``None``: every layer slides.
        rope_local_theta: with ``sliding_window_pattern``, the sliding layers' own rotary base, unscaled
            (Gemma 3's ``rope_local_base_freq``); ``rope_theta`` and ``rope_scaling`` are then the global
            layers'. ``None``: every layer has the same rotary positions.
    """

    num_layers: int
    final_norm: bool | None = None
    positional: str = "none"
    max_len: int = 5000
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = field(default=None, hash=False)
    sliding_window: int | None = None
    sliding_window_pattern: int | None = None
    rope_local_theta: float | None = None
