"""Attention and its key/value cache: behaviour that mutation testing (tools/mutation.py) found the other tests
did not pin down (dropout, grouped heads without a batch dim, argument checks, biases, rotary positions with a
cache, the cache's growth).

The ``meta`` device stands in for an accelerator: a mask built on the CPU where the queries live elsewhere fails.
"""

from __future__ import annotations

import re

import pytest
import torch

from attnkit.nn.attention import KVCache, MultiHeadAttention, attend, scaled_dot_product_attention
from attnkit.nn.masks import PreparedAttention, prepare_attention
from attnkit.nn.positional import RotaryEmbedding


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
    return weights @ v, weights


def test_attend_defaults_are_no_dropout_and_no_weights() -> None:
    q, k, v = torch.randn(3, 1, 2, 3, 4).unbind(0)
    out, weights = attend(q, k, v, PreparedAttention())
    assert weights is None
    torch.testing.assert_close(out, _reference(q, k, v)[0])
    out, weights = scaled_dot_product_attention(q, k, v)
    assert weights is None
    torch.testing.assert_close(out, _reference(q, k, v)[0])


@pytest.mark.parametrize("need_weights", [False, True])
def test_dropout_zeroes_weights_at_its_rate_and_rescales_the_rest(need_weights: bool) -> None:
    """With ``v`` the identity, the output rows are the (dropped-out) attention weights themselves."""
    p = 0.25
    q = torch.randn(1, 1, 64, 8)
    k = torch.randn(1, 1, 16, 8)
    v = torch.eye(16)[None, None]
    expected = _reference(q, k, v)[1]
    out, _ = scaled_dot_product_attention(q, k, v, dropout_p=p, need_weights=need_weights)
    kept = out != 0
    assert 0.15 < 1 - kept.float().mean().item() < 0.35  # about p of the weights dropped
    torch.testing.assert_close(out[kept], expected[kept] / (1 - p))


def test_attention_layer_drops_out_only_in_training() -> None:
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 5, 8)
    mha.train()
    assert not torch.equal(mha(x)[0], mha(x)[0])
    mha.eval()
    assert torch.equal(mha(x)[0], mha(x)[0])


def test_additive_mask_follows_the_queries_dtype() -> None:
    q, k, v = torch.randn(3, 1, 2, 3, 4, dtype=torch.float64).unbind(0)
    slopes = torch.tensor([0.5, 0.25])
    prepared = prepare_attention(batch=1, q_len=3, k_len=3, num_heads=2, alibi_slopes=slopes)  # float32
    bias = -slopes[:, None, None] * (torch.arange(3)[:, None] - torch.arange(3)[None, :]).abs()
    weights = (q @ k.transpose(-2, -1) / 2 + bias.double()).softmax(-1)
    for need_weights in (False, True):
        out, _ = attend(q, k, v, prepared, need_weights=need_weights)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, weights @ v)


@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_query_heads_without_a_batch_dim(need_weights: bool) -> None:
    """``q [Hq, T, d]`` with ``k, v [Hkv, T, d]``: key/value head j serves query heads 2j and 2j + 1."""
    q = torch.randn(4, 3, 8)
    k, v = torch.randn(2, 2, 5, 8).unbind(0)
    out, _ = scaled_dot_product_attention(q, k, v, need_weights=need_weights)
    expected, _ = _reference(q, k.repeat_interleave(2, dim=0), v.repeat_interleave(2, dim=0))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(("batch", "head_dim"), [(2, 4), (1, 3)])
def test_key_value_heads_must_divide_query_heads(batch: int, head_dim: int) -> None:
    q = torch.randn(batch, 3, 5, head_dim)
    k = torch.randn(batch, 2, 5, head_dim)
    with pytest.raises(ValueError, match=re.escape("2 key/value heads must divide 3 query heads")):
        scaled_dot_product_attention(q, k, k)


def test_mask_is_checked_against_the_broadcast_of_query_and_key_batch_dims() -> None:
    mask = torch.ones(2, 2, 3, 5, dtype=torch.bool)
    # keys with fewer leading dims than the queries, and the other way round
    for q, k in ((torch.randn(2, 2, 3, 8), torch.randn(2, 5, 8)), (torch.randn(2, 3, 8), torch.randn(2, 2, 5, 8))):
        out, _ = scaled_dot_product_attention(q, k, k, mask, need_weights=True)
        assert out.shape == (2, 2, 3, 8)


def test_causal_attention_stays_on_the_queries_device() -> None:
    q = torch.randn(1, 2, 3, 4, device="meta")
    out, weights = scaled_dot_product_attention(q, q, q, is_causal=True, need_weights=True)
    assert out.device.type == "meta" and weights is not None and weights.device.type == "meta"
    mha = MultiHeadAttention(8, 2).to("meta")
    out, weights = mha(torch.randn(1, 3, 8, device="meta"), is_causal=True, need_weights=True)
    assert out.device.type == "meta"


# ------------------------------------------------------------------------------------------------ the layer


def test_constructor_checks_and_their_messages() -> None:
    MultiHeadAttention(1, 1)  # the smallest layer
    with pytest.raises(ValueError, match="must be positive, got 8 and 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match=re.escape("(1 = multi-query, num_heads = multi-head)")):
        MultiHeadAttention(8, 4, num_kv_heads=0)
    divisors_720 = "[1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16]..., or set head_dim"
    with pytest.raises(ValueError, match=re.escape(f"choose num_heads in {divisors_720}")):
        MultiHeadAttention(720, 7)
    divisors_60 = "[1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60], or"
    with pytest.raises(ValueError, match=re.escape(f"choose num_heads in {divisors_60}")):
        MultiHeadAttention(60, 7)  # exactly 12 divisors: all shown, no "..."
    with pytest.raises(ValueError, match=re.escape("choose num_heads in [1, 2, 5, 10], or set head_dim")):
        MultiHeadAttention(10, 3)


def test_projection_biases_follow_bias_and_qkv_bias() -> None:
    fused = MultiHeadAttention(8, 2, bias=False)
    assert fused.in_proj.bias is None and fused.out_proj.bias is None
    fused = MultiHeadAttention(8, 2, bias=True, qkv_bias=False)
    assert fused.in_proj.bias is None and fused.out_proj.bias is not None
    split = MultiHeadAttention(8, 2, kdim=6, vdim=6, bias=False)
    assert split.q_proj.bias is None and split.k_proj.bias is None and split.v_proj.bias is None


def test_separate_projections_unless_both_memory_sizes_are_the_width() -> None:
    mha = MultiHeadAttention(8, 2, kdim=8, vdim=6)
    assert mha.v_proj.in_features == 6 and mha.k_proj.in_features == 8
    assert not hasattr(mha, "in_proj")


def test_prepared_excludes_every_other_mask_argument() -> None:
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    prepared = prepare_attention(batch=1, q_len=3, k_len=3)
    message = "^" + re.escape("pass either `prepared` or attn_mask/key_padding_mask/is_causal, not both") + "$"
    for kwargs in (
        {"attn_mask": torch.ones(3, 3, dtype=torch.bool)},
        {"key_padding_mask": torch.ones(1, 3, dtype=torch.bool)},
        {"is_causal": True},
    ):
        with pytest.raises(ValueError, match=message):
            mha(x, prepared=prepared, **kwargs)


def test_forward_error_messages() -> None:
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=re.escape("a static (cross-attention) KVCache needs `memory` on its first")):
        MultiHeadAttention(8, 2)(x, cache=KVCache(static=True))
    with pytest.raises(ValueError, match=re.escape("this MultiHeadAttention has kdim/vdim != embed_dim: pass")):
        MultiHeadAttention(8, 2, kdim=6, vdim=6)(x)
    with pytest.raises(ValueError, match=re.escape("kdim != vdim: pass keys and values through `memory` of one")):
        MultiHeadAttention(8, 2, kdim=6, vdim=4)(x, torch.randn(1, 4, 6))
    with pytest.raises(ValueError, match=re.escape("is_causal: q_len (3) must not exceed k_len (2) (queries are")):
        MultiHeadAttention(8, 2)(x, torch.randn(1, 2, 8), is_causal=True)


@pytest.mark.parametrize("bias", [True, False])
def test_cross_attention_with_grouped_heads_and_a_fused_projection(bias: bool) -> None:
    mha = MultiHeadAttention(8, 4, num_kv_heads=2, bias=bias)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    w_q, w_k, w_v = mha.in_proj.weight.split([8, 4, 4])
    b_q, b_k, b_v = mha.in_proj.bias.split([8, 4, 4]) if bias else (None, None, None)
    q = torch.nn.functional.linear(x, w_q, b_q).view(2, 3, 4, 2).transpose(1, 2)
    k = torch.nn.functional.linear(memory, w_k, b_k).view(2, 5, 2, 2).transpose(1, 2).repeat_interleave(2, dim=1)
    v = torch.nn.functional.linear(memory, w_v, b_v).view(2, 5, 2, 2).transpose(1, 2).repeat_interleave(2, dim=1)
    expected = mha.out_proj(_reference(q, k, v)[0].transpose(1, 2).reshape(2, 3, 8))
    torch.testing.assert_close(mha(x, memory)[0], expected)


def _pair_with_and_without_rotary() -> tuple[MultiHeadAttention, MultiHeadAttention]:
    plain = MultiHeadAttention(8, 2)
    rotary = MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4))
    rotary.load_state_dict(plain.state_dict())
    return plain, rotary


def test_rotary_turns_queries_and_keys_in_self_attention_only() -> None:
    plain, rotary = _pair_with_and_without_rotary()
    x, memory = torch.randn(1, 4, 8), torch.randn(1, 6, 8)
    assert not torch.allclose(rotary(x)[0], plain(x)[0])
    torch.testing.assert_close(rotary(x, memory)[0], plain(x, memory)[0])  # cross-attention: no rotation
    # the rotation itself, from the fused projection's q and k
    q, k, v = rotary.in_proj(x).view(1, 4, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = rotary.rotary(q), rotary.rotary(k)  # type: ignore[misc]
    expected = rotary.out_proj(_reference(q, k, v)[0].transpose(1, 2).reshape(1, 4, 8))
    torch.testing.assert_close(rotary(x)[0], expected)


def test_cached_decoding_with_rotary_equals_the_full_forward() -> None:
    _, mha = _pair_with_and_without_rotary()
    x = torch.randn(1, 6, 8)
    full = mha(x, is_causal=True)[0]
    cache = KVCache()
    steps = [mha(x[:, :3], is_causal=True, cache=cache)[0]]
    steps += [mha(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


# ------------------------------------------------------------------------------------------------ the cache


def test_cache_takes_a_long_first_chunk_and_grows_by_doubling() -> None:
    """Decoding one position at a time reuses one buffer until it is full (no copy per step)."""
    cache = KVCache()
    k = torch.randn(1, 2, 40, 4)
    keys, values = cache.append(k[:, :, :20], -k[:, :, :20])  # longer than the initial 16
    torch.testing.assert_close(keys, k[:, :, :20])
    buffers = set()
    for t in range(20, 40):
        keys, values = cache.append(k[:, :, t : t + 1], -k[:, :, t : t + 1])
        buffers.add(keys.data_ptr())
    torch.testing.assert_close(keys, k)
    torch.testing.assert_close(values, -k)
    assert len(buffers) <= 2  # the first buffer (room for 40) and at most one doubling


def test_cache_backward_when_only_the_keys_need_gradients() -> None:
    cache = KVCache()
    k = torch.randn(1, 1, 3, 4, requires_grad=True)
    v = torch.randn(1, 1, 3, 4)
    q = torch.randn(1, 1, 1, 4)
    loss = torch.zeros(())
    for t in range(3):
        keys, values = cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
        loss = loss + scaled_dot_product_attention(q, keys, values)[0].sum()
    loss.backward()
    expected = torch.zeros(())
    k2 = k.detach().clone().requires_grad_(True)
    for t in range(3):
        expected = expected + scaled_dot_product_attention(q, k2[:, :, : t + 1], v[:, :, : t + 1])[0].sum()
    expected.backward()
    assert k.grad is not None and k2.grad is not None
    torch.testing.assert_close(k.grad, k2.grad)
