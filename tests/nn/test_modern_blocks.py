"""Modern decoder blocks: RMSNorm, grouped-query attention, RoPE scaling, ALiBi, sliding windows.

Each block is compared with an explicit reference (written out here, or Hugging Face transformers'
own code), and the fused (SDPA) path with the explicit path that returns weights.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

from attnkit.nn import (
    MultiHeadAttention,
    RMSNorm,
    RotaryEmbedding,
    StackSpec,
    TransformerDecoder,
    TransformerEncoder,
    alibi_slopes,
    band_mask,
    prepare_attention,
    rope_inv_freq,
)

D, H = 16, 4


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, bias: Tensor | None = None) -> Tensor:
    """softmax(q kᵀ/√d + bias, masked) v with key/value heads repeated to the query heads."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def _project(mha: MultiHeadAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q [B, H, T, hd], k and v [B, Hkv, T, hd] computed from the separate weight blocks of in_proj."""
    w_q, w_k, w_v = mha.in_proj.weight.split(mha._sizes)
    b = mha.in_proj.bias.split(mha._sizes) if mha.in_proj.bias is not None else (None, None, None)
    batch, t, _ = x.shape

    def heads(w: Tensor, bias: Tensor | None, n: int) -> Tensor:
        return F.linear(x, w, bias).view(batch, t, n, mha.head_dim).transpose(1, 2)

    return heads(w_q, b[0], mha.num_heads), heads(w_k, b[1], mha.num_kv_heads), heads(w_v, b[2], mha.num_kv_heads)


# --------------------------------------------------------------------------- RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_llama(dtype: torch.dtype) -> None:
    ours, ref = RMSNorm(D, eps=1e-6), LlamaRMSNorm(D, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    x = (torch.randn(2, 5, D) * 3).to(dtype)
    ours, ref = ours.to(dtype), ref.to(dtype)
    assert torch.equal(ours(x), ref(x))
    expected = ours.weight.float() * x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(ours(x).float(), expected, atol=1e-5 if dtype == torch.float32 else 0.05, rtol=0.02)


def test_rmsnorm_errors() -> None:
    with pytest.raises(ValueError, match="expected 16"):
        RMSNorm(16)(torch.randn(2, 8))
    with pytest.raises(ValueError, match="eps > 0"):
        RMSNorm(16, eps=0.0)


# --------------------------------------------------------------------------- grouped-query attention


def test_gqa_with_all_heads_is_todays_mha_bit_for_bit() -> None:
    torch.manual_seed(1)
    mha = MultiHeadAttention(D, H)
    torch.manual_seed(1)
    gqa = MultiHeadAttention(D, H, num_kv_heads=H)
    sd, sd_gqa = mha.state_dict(), gqa.state_dict()
    assert sd.keys() == sd_gqa.keys() and all(torch.equal(sd[k], sd_gqa[k]) for k in sd)
    x = torch.randn(2, 6, D)
    kpm = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
    for kw in (dict(is_causal=True), dict(key_padding_mask=kpm), dict(is_causal=True, need_weights=True)):
        a, wa = mha(x, **kw)
        b, wb = gqa(x, **kw)
        assert torch.equal(a, b)
        assert (wa is None and wb is None) or torch.equal(wa, wb)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gqa_matches_explicit_reference_and_paths_agree(num_kv_heads: int) -> None:
    mha = MultiHeadAttention(D, H, num_kv_heads=num_kv_heads, qkv_bias=True, bias=False).eval()
    assert mha.in_proj.weight.shape == ((H + 2 * num_kv_heads) * D // H, D)
    assert mha.in_proj.bias is not None and mha.out_proj.bias is None
    with torch.no_grad():
        mha.in_proj.bias.normal_()
    x = torch.randn(2, 7, D)
    q, k, v = _project(mha, x)
    allowed = band_mask(7, 7, causal=True, window=None)
    expected = mha.out_proj(_explicit_attention(q, k, v, allowed).transpose(1, 2).reshape(2, 7, D))
    fused, _ = mha(x, is_causal=True)
    explicit, weights = mha(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=0)
    assert weights is not None and weights.shape == (2, H, 7, 7)


def test_gqa_cache_stores_only_kv_heads_and_matches_uncached() -> None:
    dec = TransformerDecoder(
        StackSpec(D, H, 32, 0.0, cross_attention=False, norm_first=True, num_kv_heads=2, num_layers=2)
    ).eval()
    x = torch.randn(2, 6, D)
    full = dec(x)
    cache = dec.new_cache()
    steps = [dec(x[:, :3], cache=cache)] + [dec(x[:, i : i + 1], cache=cache) for i in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    keys = cache.layers[0].self_attn.keys
    assert keys is not None and keys.shape == (2, 2, 6, D // H)


def test_num_kv_heads_must_divide_num_heads() -> None:
    with pytest.raises(ValueError, match=r"num_kv_heads \(3\) must divide num_heads \(4\).*\[1, 2, 4\]"):
        MultiHeadAttention(D, H, num_kv_heads=3)


# --------------------------------------------------------------------------- RoPE


def _llama_config(**rope: object) -> LlamaConfig:
    params = {"rope_type": "default", "rope_theta": 500000.0, **rope}
    return LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=128, rope_parameters=params)


@pytest.mark.parametrize(
    "rope",
    [
        dict(rope_type="linear", factor=4.0),
        dict(rope_type="dynamic", factor=2.0),
        dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
    ],
)
@pytest.mark.parametrize("seq_len", [None, 300])
def test_rope_inv_freq_matches_transformers(rope: dict, seq_len: int | None) -> None:
    config = _llama_config(**rope)
    expected, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu", seq_len=seq_len)
    original = rope.get("original_max_position_embeddings", 128)
    ours = rope_inv_freq(
        16,
        base=500000.0,
        scaling=rope["rope_type"],
        factor=rope["factor"],
        low_freq_factor=rope.get("low_freq_factor", 1.0),
        high_freq_factor=rope.get("high_freq_factor", 4.0),
        original_max_position_embeddings=original,
        seq_len=seq_len,
    )
    torch.testing.assert_close(ours, expected, atol=0, rtol=1e-6)
    if rope["rope_type"] == "dynamic" and seq_len == 300:  # the base really changed
        assert not torch.allclose(ours, rope_inv_freq(16, base=500000.0))


@pytest.mark.parametrize(
    "rope",
    [
        dict(rope_type="default"),
        dict(rope_type="linear", factor=4.0),
        dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        dict(rope_type="dynamic", factor=2.0),
    ],
)
def test_rotary_cos_sin_match_llama_rotary_embedding(rope: dict) -> None:
    ref = LlamaRotaryEmbedding(_llama_config(**rope))
    scaling = None if rope["rope_type"] == "default" else rope["rope_type"]
    extra = {k: v for k, v in rope.items() if k != "rope_type"}
    if scaling == "dynamic":
        extra["original_max_position_embeddings"] = 128
    ours = RotaryEmbedding(16, base=500000.0, scaling=scaling, **extra)
    positions = torch.stack([torch.arange(200), torch.arange(200) + 50])  # past 128: dynamic kicks in
    x = torch.zeros(2, 200, 64)
    cos_ref, sin_ref = ref(x, positions)
    cos, sin = ours.cos_sin(positions)
    torch.testing.assert_close(cos[:, 0], cos_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(sin[:, 0], sin_ref, atol=1e-5, rtol=0)


def test_rotary_per_row_positions_equal_offsets() -> None:
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 5, 8)
    per_row = rope(x, positions=torch.stack([torch.arange(5), torch.arange(7, 12)]))
    torch.testing.assert_close(per_row[0], rope(x[:1], offset=0)[0])
    torch.testing.assert_close(per_row[1], rope(x[1:], offset=7)[0])


# --------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32])
def test_alibi_slopes_match_bloom(num_heads: int) -> None:
    mask = torch.ones(1, 4)
    bloom = build_alibi_tensor(mask, num_heads, torch.float32)  # [H, 1, T]: slope * key position
    torch.testing.assert_close(alibi_slopes(num_heads), bloom[:, 0, 1], atol=0, rtol=1e-6)


def test_alibi_slopes_paper_values() -> None:
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]


@pytest.mark.parametrize("need_weights", [False, True])
def test_alibi_attention_matches_explicit_reference(need_weights: bool) -> None:
    dec = TransformerDecoder(
        StackSpec(D, H, 32, 0.0, cross_attention=False, norm_first=True, positional="alibi", num_layers=1)
    ).eval()
    mha = dec.layers[0].self_attn
    x = torch.randn(2, 6, D)
    kpm = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
    h = dec.layers[0].norm1(x)
    q, k, v = _project(mha, h)
    pos = torch.arange(6)
    bias = -alibi_slopes(H)[:, None, None] * (pos[:, None] - pos[None, :]).abs()
    allowed = band_mask(6, 6, causal=True, window=None) & kpm[:, None, None, :]
    attn = _explicit_attention(q, k, v, allowed, bias)
    attn = attn.masked_fill(~allowed.any(-1, keepdim=True), 0.0)  # fully masked rows give zeros
    expected = mha.out_proj(attn.transpose(1, 2).reshape(2, 6, D))
    prepared = prepare_attention(
        None, kpm, batch=2, q_len=6, k_len=6, num_heads=H, is_causal=True, alibi_slopes=alibi_slopes(H),
        need_weights=need_weights,
    )  # fmt: skip
    out, _ = mha(h, prepared=prepared, need_weights=need_weights)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert not out.isnan().any()


# --------------------------------------------------------------------------- sliding window


def test_band_mask_sliding_window() -> None:
    m = band_mask(5, 5, causal=True, window=2)
    assert m.tolist() == [
        [True, False, False, False, False],
        [True, True, False, False, False],
        [False, True, True, False, False],
        [False, False, True, True, False],
        [False, False, False, True, True],
    ]
    assert band_mask(1, 5, causal=True, window=2).tolist() == [[False, False, False, True, True]]


@pytest.mark.parametrize("need_weights", [False, True])
def test_sliding_window_matches_explicit_reference_and_cache(need_weights: bool) -> None:
    dec = TransformerDecoder(
        StackSpec(D, H, 32, 0.0, cross_attention=False, norm_first=True, sliding_window=3, num_kv_heads=2, num_layers=1)
    ).eval()
    mha = dec.layers[0].self_attn
    x = torch.randn(2, 8, D)
    h = dec.layers[0].norm1(x)
    q, k, v = _project(mha, h)
    expected = mha.out_proj(
        _explicit_attention(q, k, v, band_mask(8, 8, causal=True, window=3)).transpose(1, 2).reshape(2, 8, D)
    )
    prepared = prepare_attention(
        batch=2, q_len=8, k_len=8, num_heads=H, is_causal=True, window=3, need_weights=need_weights
    )
    out, _ = mha(h, prepared=prepared, need_weights=need_weights)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    # a window of 3 differs from full causal attention, and the cached stack agrees with the uncached one
    full, _ = mha(h, is_causal=True)
    assert (full - out).abs().max() > 1e-3
    cache = dec.new_cache()
    steps = [dec(x[:, :2], cache=cache)] + [dec(x[:, i : i + 1], cache=cache) for i in range(2, 8)]
    torch.testing.assert_close(torch.cat(steps, 1), dec(x), atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- the mask, once per stack


@pytest.mark.parametrize(
    "options", [dict(), dict(positional="rotary"), dict(positional="alibi"), dict(sliding_window=2)]
)
def test_stack_prepared_mask_equals_per_layer_masks(options: dict) -> None:
    """The stack prepares the mask once; each layer given the raw masks computes the same."""
    enc = TransformerEncoder(StackSpec(D, H, 32, 0.0, norm_first=True, **options, num_layers=2)).eval()
    x = torch.randn(2, 5, D)
    kpm = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out, maps = enc.forward_with_attention(x, key_padding_mask=kpm, is_causal=True)
    fused = enc(x, key_padding_mask=kpm, is_causal=True)
    torch.testing.assert_close(fused, out, atol=1e-5, rtol=0)
    if options.get("positional") != "alibi" and not options.get("sliding_window"):
        h = x
        for layer in enc.layers:
            h, _ = layer(h, key_padding_mask=kpm, is_causal=True)
        torch.testing.assert_close(enc.norm(h), out, atol=1e-5, rtol=0)
    assert all(not m.isnan().any() for m in maps)


def test_prepare_attention_decides_causality_once() -> None:
    fused = prepare_attention(batch=2, q_len=4, k_len=4, is_causal=True)
    assert fused.mask is None and fused.is_causal  # the kernel's own causal mask
    step = prepare_attention(batch=2, q_len=1, k_len=9, is_causal=True)
    assert step.mask is None and not step.is_causal  # one new position sees every cached one
    chunk = prepare_attention(batch=2, q_len=3, k_len=9, is_causal=True)
    assert chunk.mask is not None and chunk.mask.shape == (3, 9)
    weights = prepare_attention(batch=2, q_len=4, k_len=4, is_causal=True, need_weights=True)
    assert weights.mask is not None and not weights.is_causal
    window = prepare_attention(batch=2, q_len=1, k_len=9, is_causal=True, window=4)
    assert window.mask is not None and window.mask.sum().item() == 4
    kpm = torch.tensor([[False, True]])
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(1, 2\); expected \[B, Tk\]=\[1, 3\]"):
        prepare_attention(None, kpm, batch=1, q_len=3, k_len=3)
