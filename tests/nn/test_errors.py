"""Bad inputs raise clear errors that name the argument and the shapes involved."""

from __future__ import annotations

import pytest
import torch

from attnkit.nn import (
    BlockSpec,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    KVCache,
    LearnedPositionalEncoding,
    MultiHeadAttention,
    RotaryEmbedding,
    StackSpec,
    TransformerDecoder,
    TransformerEncoder,
    scaled_dot_product_attention,
)


@pytest.fixture
def mha() -> MultiHeadAttention:
    return MultiHeadAttention(8, 2)


def test_heads_must_divide_embed_dim() -> None:
    with pytest.raises(ValueError, match=r"num_heads \(3\) must divide embed_dim \(10\).*\[1, 2, 5, 10\]"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"num_heads \(3\) must divide embed_dim \(8\)"):
        TransformerEncoder(StackSpec(8, 3, num_layers=1))
    # an explicit head_dim lifts the restriction
    assert MultiHeadAttention(10, 3, head_dim=4)(torch.randn(1, 2, 10))[0].shape == (1, 2, 10)


def test_non_positive_sizes() -> None:
    with pytest.raises(ValueError, match=r"embed_dim and num_heads must be positive, got 0 and 2"):
        MultiHeadAttention(0, 2)
    with pytest.raises(ValueError, match=r"num_layers must be at least 1, got 0"):
        TransformerDecoder(StackSpec(8, 2, num_layers=0))


def test_bad_dropout() -> None:
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        MultiHeadAttention(8, 2, dropout=1.0)


def test_x_with_wrong_feature_size(mha: MultiHeadAttention) -> None:
    with pytest.raises(ValueError, match=r"x has 7 features \(shape \(2, 5, 7\)\), expected 8"):
        mha(torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r"x has 9 features \(shape \(2, 3, 9\)\), expected 8"):
        TransformerEncoder(StackSpec(8, 2, num_layers=1))(torch.randn(2, 3, 9))


def test_two_dimensional_x(mha: MultiHeadAttention) -> None:
    with pytest.raises(ValueError, match=r"x must be \[batch, seq, features\], got shape \(5, 8\)"):
        mha(torch.randn(5, 8))
    with pytest.raises(ValueError, match=r"x must be \[batch, seq, features\], got shape \(5, 8\)"):
        EncoderBlock(BlockSpec(8, 2))(torch.randn(5, 8))


def test_memory_batch_mismatch(mha: MultiHeadAttention) -> None:
    expected = r"memory has batch size 3 \(shape \(3, 4, 8\)\) but x has 2 \(shape \(2, 5, 8\)\)"
    with pytest.raises(ValueError, match=expected):
        mha(torch.randn(2, 5, 8), torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match=r"memory has batch size 1 .* but x has 2"):
        TransformerDecoder(StackSpec(8, 2, num_layers=1))(torch.randn(2, 3, 8), torch.randn(1, 4, 8))


def test_memory_with_wrong_feature_size(mha: MultiHeadAttention) -> None:
    with pytest.raises(ValueError, match=r"memory has 6 features \(shape \(2, 4, 6\)\), expected 8"):
        mha(torch.randn(2, 5, 8), torch.randn(2, 4, 6))


def test_attn_mask_of_wrong_shape(mha: MultiHeadAttention) -> None:
    with pytest.raises(ValueError, match=r"attn_mask has shape \(5, 4\); expected \[Tq, Tk\]=\[5, 5\]"):
        mha(torch.randn(2, 5, 8), attn_mask=torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(2, 3, 5, 5\).*\[B, H, Tq, Tk\]=\[2, 2, 5, 5\]"):
        mha(torch.randn(2, 5, 8), attn_mask=torch.ones(2, 3, 5, 5, dtype=torch.bool))
    # cross-attention: Tk is the memory length
    with pytest.raises(ValueError, match=r"attn_mask has shape \(3, 3\).*\[Tq, Tk\]=\[3, 4\]"):
        mha(torch.randn(2, 3, 8), torch.randn(2, 4, 8), attn_mask=torch.ones(3, 3, dtype=torch.bool))


def test_key_padding_mask_of_wrong_shape(mha: MultiHeadAttention) -> None:
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(2, 4\); expected \[B, Tk\]=\[2, 5\]"):
        mha(torch.randn(2, 5, 8), key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(3, 5\); expected \[B, Tk\]=\[2, 5\]"):
        mha(torch.randn(2, 5, 8), key_padding_mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(2, 3\); expected \[B, Tk\]=\[2, 4\]"):
        TransformerDecoder(StackSpec(8, 2, num_layers=1))(
            torch.randn(2, 3, 8), torch.randn(2, 4, 8), memory_key_padding_mask=torch.ones(2, 3, dtype=torch.bool)
        )


def test_float_masks_are_rejected(mha: MultiHeadAttention) -> None:
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeError, match=r"attn_mask must be a boolean tensor.*got dtype torch.float32"):
        mha(x, attn_mask=torch.ones(5, 5))
    with pytest.raises(TypeError, match=r"key_padding_mask must be a boolean tensor.*bool"):
        mha(x, key_padding_mask=torch.ones(2, 5))
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor.*bool"):
        scaled_dot_product_attention(x, x, x, torch.zeros(5, 5))


def test_sdpa_shape_errors() -> None:
    with pytest.raises(ValueError, match=r"same feature size.*q \(3, 4\) and k \(3, 5\)"):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"same length.*k \(3, 4\) and v \(2, 4\)"):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3\) does not broadcast.*\(3, 3\)"):
        scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.ones(2, 3, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match=r"q_len \(4\) must not exceed k_len \(3\)"):
        scaled_dot_product_attention(torch.randn(4, 4), torch.randn(3, 4), torch.randn(3, 4), is_causal=True)


def test_unknown_activation() -> None:
    choices = r"\['relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu_tanh'\]"
    with pytest.raises(ValueError, match=r"unknown activation 'tanh'.*" + choices):
        FeedForward(8, 16, activation="tanh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown activation 'silu'"):
        EncoderBlock(BlockSpec(8, 2, activation="silu"))


def test_learned_positional_encoding_too_long() -> None:
    pe = LearnedPositionalEncoding(8, max_len=4)
    with pytest.raises(ValueError, match=r"position 5 but the learned positional encoding has max_len=4"):
        pe(torch.randn(1, 5, 8))


def test_kdim_vdim_misuse() -> None:
    with pytest.raises(ValueError, match=r"kdim/vdim != embed_dim: pass `memory`"):
        MultiHeadAttention(8, 2, kdim=6, vdim=6)(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match=r"kdim != vdim"):
        MultiHeadAttention(8, 2, kdim=6, vdim=4)(torch.randn(2, 3, 8), torch.randn(2, 3, 6))


def test_rotary_dim_must_match_head_dim() -> None:
    with pytest.raises(ValueError, match=r"rotary embedding has dim 8; it must equal head_dim \(4\)"):
        MultiHeadAttention(8, 2, rotary=RotaryEmbedding(8))
    with pytest.raises(ValueError, match=r"even head dimension, got 3"):
        TransformerEncoder(StackSpec(6, 2, positional="rotary", num_layers=1))


def test_decoder_memory_misuse() -> None:
    with pytest.raises(ValueError, match=r"has cross-attention: pass the encoder output as memory"):
        TransformerDecoder(StackSpec(8, 2, num_layers=1))(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match=r"cross_attention=False; do not pass memory"):
        DecoderBlock(BlockSpec(8, 2, cross_attention=False))(torch.randn(1, 3, 8), torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match=r"static \(cross-attention\) KVCache needs `memory`"):
        MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), cache=KVCache(static=True))


def test_decoder_cache_from_another_decoder() -> None:
    with pytest.raises(ValueError, match=r"cache has 2 layers, the decoder 1: use decoder.new_cache\(\)"):
        TransformerDecoder(StackSpec(8, 2, num_layers=1))(
            torch.randn(1, 3, 8),
            torch.randn(1, 3, 8),
            cache=TransformerDecoder(StackSpec(8, 2, num_layers=2)).new_cache(),
        )


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tgt_mask": torch.ones(3, 3, dtype=torch.bool)}, "tgt_mask"),
        ({"tgt_key_padding_mask": torch.ones(2, 4, dtype=torch.bool)}, "tgt_key_padding_mask"),
        ({"memory_mask": torch.ones(5, 5, dtype=torch.bool)}, "memory_mask"),
        ({"memory_key_padding_mask": torch.ones(2, 5, dtype=torch.bool)}, "memory_key_padding_mask"),
        ({"memory_key_padding_mask": torch.ones(2, 7)}, "memory_key_padding_mask"),
    ],
)
def test_decoder_mask_errors_name_the_decoder_argument(kwargs, name):
    from attnkit.nn import StackSpec, TransformerDecoder

    dec = TransformerDecoder(StackSpec(8, 2, 16, 0.0, num_layers=1))
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    with pytest.raises((ValueError, TypeError), match=rf"^{name} "):
        dec(x, memory, **kwargs)
