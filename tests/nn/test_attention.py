"""Scaled dot-product attention, MultiHeadAttention and KVCache."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from attnkit.nn import (
    KVCache,
    MultiHeadAttention,
    StackSpec,
    TransformerDecoder,
    TransformerEncoder,
    padding_mask,
    scaled_dot_product_attention,
)
from attnkit.nn.masks import masked_fill_value

FUSED_ATOL = 1e-6


def both_paths(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, **kw) -> tuple[Tensor, Tensor, Tensor]:
    """Run the fused path (need_weights=False) and the explicit one; return both outputs and the weights."""
    fused, none = scaled_dot_product_attention(q, k, v, mask, need_weights=False, **kw)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True, **kw)
    assert none is None
    assert weights is not None
    return fused, explicit, weights


def reference_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Textbook softmax(q kᵀ/√d) v in float64, for rows with at least one visible key."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return (w @ v).float(), w.float()


def explicit_causal(tq: int, tk: int) -> Tensor:
    """Bottom-right aligned causal mask built element by element: query i is position tk - tq + i."""
    m = torch.zeros(tq, tk, dtype=torch.bool)
    for i in range(tq):
        for j in range(tk):
            m[i, j] = j <= tk - tq + i
    return m


# --------------------------------------------------------------------------- the worked example


def test_tutorial_worked_example() -> None:
    torch.manual_seed(42)
    q = torch.randn(3, 2)
    k = torch.randn(3, 2)
    v = torch.randn(3, 2)
    out, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
    expected = torch.tensor([[0.4028, 0.2886, 0.3086], [0.3538, 0.3069, 0.3393], [0.1303, 0.4630, 0.4067]])
    assert weights is not None
    assert torch.allclose(weights.round(decimals=4), expected, atol=1e-6), weights
    assert torch.allclose(out, expected @ v, atol=1e-3)
    ref_out, _ = reference_attention(q, k, v)
    assert torch.allclose(out, ref_out, atol=1e-6)


# --------------------------------------------------------------------------- fused == explicit


def test_fused_equals_explicit_without_mask() -> None:
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    fused, explicit, w = both_paths(q, k, v)
    ref_out, ref_w = reference_attention(q, k, v)
    assert fused.shape == (2, 3, 5, 6)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(explicit, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)


def test_scale_argument_is_used_by_both_paths() -> None:
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    fused, explicit, _ = both_paths(q, k, v, scale=0.3)
    ref_out, _ = reference_attention(q * 0.3 * math.sqrt(4), k, v)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(explicit, ref_out, atol=1e-5)


@pytest.mark.parametrize("shape", ["tq_tk", "b_tq_tk", "b_h_tq_tk", "key_padding"])
def test_mha_fused_equals_explicit_for_each_mask_shape(shape: str) -> None:
    b, h, tq, tk, d = 3, 2, 4, 6, 8
    mha = MultiHeadAttention(d, h)
    x, memory = torch.randn(b, tq, d), torch.randn(b, tk, d)
    masks: dict[str, Tensor] = {}
    if shape == "tq_tk":
        masks["attn_mask"] = torch.rand(tq, tk) > 0.5
    elif shape == "b_tq_tk":
        masks["attn_mask"] = torch.rand(b, tq, tk) > 0.5
    elif shape == "b_h_tq_tk":
        masks["attn_mask"] = torch.rand(b, h, tq, tk) > 0.5
    else:
        masks["key_padding_mask"] = torch.arange(tk)[None] < torch.tensor([6, 3, 1])[:, None]
    fused, none = mha(x, memory, **masks)
    explicit, w = mha(x, memory, need_weights=True, **masks)
    assert none is None
    assert w.shape == (b, h, tq, tk)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    # the mask reached the weights with the documented meaning (True = may attend)
    expected_mask = {
        "tq_tk": lambda m: m[None, None],
        "b_tq_tk": lambda m: m[:, None],
        "b_h_tq_tk": lambda m: m,
        "key_padding": lambda m: m[:, None, None, :],
    }[shape](next(iter(masks.values())))
    assert (w.masked_select(~expected_mask.expand_as(w)) == 0).all()


def test_mask_broadcasts_over_leading_dims() -> None:
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    mask = torch.rand(5, 6) > 0.4
    mask[:, 0] = True
    fused, explicit, w = both_paths(q, k, v, mask)
    ref_out, ref_w = reference_attention(q, k, v, mask)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(explicit, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)


@pytest.mark.parametrize(("tq", "tk"), [(5, 5), (2, 6), (1, 4)])
def test_is_causal_is_bottom_right_aligned(tq: int, tk: int) -> None:
    q, k, v = torch.randn(2, 2, tq, 4), torch.randn(2, 2, tk, 4), torch.randn(2, 2, tk, 4)
    fused, explicit, w = both_paths(q, k, v, is_causal=True)
    mask = explicit_causal(tq, tk)
    ref_out, ref_w = reference_attention(q, k, v, mask)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(fused, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)
    # same result as passing the explicit mask
    masked, _ = scaled_dot_product_attention(q, k, v, mask)
    assert (fused - masked).abs().max() <= FUSED_ATOL


def test_is_causal_combines_with_a_mask() -> None:
    q, k, v = torch.randn(2, 4, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    mask = torch.rand(2, 4, 6) > 0.3
    mask[..., 0] = True
    fused, explicit, w = both_paths(q, k, v, mask, is_causal=True)
    ref_out, ref_w = reference_attention(q, k, v, mask & explicit_causal(4, 6))
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(fused, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)


@pytest.mark.parametrize("lead", [(2,), (2, 3), (2, 1, 3)], ids=["1_dim", "2_dims", "3_dims"])
@pytest.mark.parametrize("masked", [False, True])
def test_leading_batch_dims(lead: tuple[int, ...], masked: bool) -> None:
    q, k, v = torch.randn(*lead, 3, 4), torch.randn(*lead, 5, 4), torch.randn(*lead, 5, 2)
    mask = None
    if masked:
        mask = torch.rand(*lead, 3, 5) > 0.5
        mask[..., 0] = True
    fused, explicit, w = both_paths(q, k, v, mask)
    ref_out, ref_w = reference_attention(q, k, v, mask)
    assert fused.shape == (*lead, 3, 2)
    assert w.shape == (*lead, 3, 5)
    assert (fused - explicit).abs().max() <= FUSED_ATOL
    assert torch.allclose(fused, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)
    # each slice on its own gives the same answer
    flat_q, flat_k, flat_v = q.reshape(-1, 3, 4), k.reshape(-1, 5, 4), v.reshape(-1, 5, 2)
    flat_m = None if mask is None else mask.reshape(-1, 3, 5)
    for i in range(flat_q.shape[0]):
        o, _ = scaled_dot_product_attention(flat_q[i], flat_k[i], flat_v[i], None if flat_m is None else flat_m[i])
        assert torch.allclose(o, fused.reshape(-1, 3, 2)[i], atol=1e-6)


# --------------------------------------------------------------------------- fully masked rows


def _fully_masked_inputs(dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, k, v = (torch.randn(2, 2, 4, 8, dtype=dtype) for _ in range(3))
    mask = torch.rand(2, 2, 4, 4) > 0.5
    mask[..., 0] = True
    mask[0, 1, 2] = False  # one query row with no visible key
    mask[1, :, 3] = False  # and one in every head of the second batch row
    return q, k, v, mask


def _check_fully_masked(out: Tensor, w: Tensor | None, mask: Tensor) -> None:
    dead = ~mask.any(-1)
    assert dead.sum() == 3
    assert torch.isfinite(out).all()
    assert (out[dead] == 0).all()
    assert (out[~dead].abs().sum(-1) > 0).all()
    if w is not None:
        assert torch.isfinite(w).all()
        assert (w[dead] == 0).all()
        torch.testing.assert_close(w[~dead].float().sum(-1), torch.ones(int((~dead).sum())), atol=1e-2, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_fp32(need_weights: bool) -> None:
    q, k, v, mask = _fully_masked_inputs()
    out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    _check_fully_masked(out, w, mask)
    fused, explicit, _ = both_paths(q, k, v, mask)
    assert (fused - explicit).abs().max() <= FUSED_ATOL


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_under_bf16_autocast(need_weights: bool) -> None:
    q, k, v, mask = _fully_masked_inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    _check_fully_masked(out, w, mask)
    ref_out, _ = reference_attention(q, k, v, mask)
    live = mask.any(-1)
    assert torch.allclose(out[live].float(), ref_out[live], atol=5e-2)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_fp16(need_weights: bool) -> None:
    # torch's CPU kernels support half-precision attention; this must run, not be skipped.
    q, k, v, mask = _fully_masked_inputs(torch.float16)
    out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert out.dtype == torch.float16
    _check_fully_masked(out, w, mask)
    ref_out, _ = reference_attention(q, k, v, mask)
    live = mask.any(-1)
    assert torch.allclose(out[live].float(), ref_out[live], atol=1e-2)


@pytest.mark.parametrize("dropout_p", [0.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gradients_finite_through_fully_masked_rows(dtype: torch.dtype, need_weights: bool, dropout_p: float) -> None:
    q, k, v, mask = _fully_masked_inputs(dtype)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights, dropout_p=dropout_p)
    loss = out.float().square().sum() + (0 if w is None else w.float().sum())
    loss.backward()
    for t in (q, k, v):
        assert t.grad is not None
        assert torch.isfinite(t.grad).all()
    dead = ~mask.any(-1)
    assert (q.grad[dead] == 0).all()  # a dead query row influences nothing


def test_mha_fully_masked_query_rows_are_finite() -> None:
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8, requires_grad=True)
    kpm = torch.tensor([[True, True, True], [False, False, False]])  # second sequence: no real key
    out, w = mha(x, key_padding_mask=kpm, need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[1] == 0).all()
    # the output of a dead row is the output projection's bias
    assert torch.allclose(out[1], mha.out_proj.bias.expand(3, 8))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_weight_rows_sum_to_one() -> None:
    q, k, v, mask = _fully_masked_inputs()
    _, w = scaled_dot_product_attention(q, k, v, mask, need_weights=True, is_causal=True)
    live = (mask & torch.ones(4, 4, dtype=torch.bool).tril()).any(-1)
    torch.testing.assert_close(w[live].sum(-1), torch.ones(int(live.sum())))
    assert (w >= 0).all()


def test_masked_fill_value_is_lowest_finite() -> None:
    assert masked_fill_value(torch.float16) == torch.finfo(torch.float16).min
    assert masked_fill_value(torch.float32) == torch.finfo(torch.float32).min
    assert masked_fill_value(torch.bfloat16) == torch.finfo(torch.bfloat16).min
    # it stays finite when stored in the dtype (a literal -1e9 would become -inf in half)
    assert torch.isfinite(torch.tensor(masked_fill_value(torch.float16), dtype=torch.float16))


def test_explicit_path_fp16_with_large_logits_matches_fp32() -> None:
    q = torch.randn(1, 4, 8) * 8
    k = torch.randn(1, 6, 8) * 8
    v = torch.randn(1, 6, 8)
    mask = torch.rand(1, 4, 6) > 0.5
    mask[..., 0] = True
    out32, w32 = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    out16, w16 = scaled_dot_product_attention(q.half(), k.half(), v.half(), mask, need_weights=True)
    assert torch.isfinite(out16).all()
    assert (w16[~mask.expand_as(w16)] == 0).all()
    assert torch.allclose(w16.float(), w32, atol=2e-2)
    assert torch.allclose(out16.float(), out32, atol=5e-2)


# --------------------------------------------------------------------------- MultiHeadAttention


def reference_mha(mha: MultiHeadAttention, x: Tensor, memory: Tensor | None = None) -> Tensor:
    """Per-head loop: Attention(x Wq_h, m Wk_h, m Wv_h) for each head, concatenated, times Wo."""
    memory = x if memory is None else memory
    inner, hd = mha.num_heads * mha.head_dim, mha.head_dim
    if mha._same_dims:
        wq, wk, wv = mha.in_proj.weight.split(inner)
        bq, bk, bv = mha.in_proj.bias.split(inner)
    else:
        wq, wk, wv = mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight
        bq, bk, bv = mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias
    heads = []
    for h in range(mha.num_heads):
        s = slice(h * hd, (h + 1) * hd)
        q = x @ wq[s].T + bq[s]
        k = memory @ wk[s].T + bk[s]
        v = memory @ wv[s].T + bv[s]
        heads.append(reference_attention(q, k, v)[0])
    return torch.cat(heads, -1) @ mha.out_proj.weight.T + mha.out_proj.bias


def _perturb_biases(mha: MultiHeadAttention) -> None:
    with torch.no_grad():
        for name, p in mha.named_parameters():
            if name.endswith("bias"):
                p.normal_()


def test_mha_matches_per_head_reference() -> None:
    mha = MultiHeadAttention(8, 4)
    _perturb_biases(mha)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with torch.no_grad():
        assert torch.allclose(mha(x)[0], reference_mha(mha, x), atol=1e-5)
        assert torch.allclose(mha(x, memory)[0], reference_mha(mha, x, memory), atol=1e-5)


def test_mha_wide_heads() -> None:
    d, h = 6, 3
    mha = MultiHeadAttention(d, h, head_dim=d)
    _perturb_biases(mha)
    assert mha.head_dim == d
    assert mha.in_proj.weight.shape == (3 * h * d, d)
    assert mha.out_proj.weight.shape == (d, h * d)
    x = torch.randn(2, 4, d)
    with torch.no_grad():
        out, w = mha(x, need_weights=True)
        fused, _ = mha(x)
    assert out.shape == (2, 4, d)
    assert w.shape == (2, h, 4, 4)
    assert torch.allclose(out, reference_mha(mha, x), atol=1e-5)
    assert (fused - out).abs().max() <= FUSED_ATOL


def test_mha_kdim_vdim_cross_attention() -> None:
    mha = MultiHeadAttention(8, 2, kdim=5, vdim=5)
    _perturb_biases(mha)
    assert mha.k_proj.weight.shape == (8, 5)
    assert mha.v_proj.weight.shape == (8, 5)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 7, 5)
    with torch.no_grad():
        out, w = mha(x, memory, need_weights=True)
    assert out.shape == (2, 3, 8)
    assert w.shape == (2, 2, 3, 7)
    assert torch.allclose(out, reference_mha(mha, x, memory), atol=1e-5)


def _xavier_bound(fan_out: int, fan_in: int) -> float:
    return math.sqrt(6.0 / (fan_in + fan_out))


@pytest.mark.parametrize(
    ("d", "h", "head_dim", "kdim"),
    [(32, 4, None, None), (16, 2, 16, None), (32, 4, None, 24)],
    ids=["default", "wide_heads", "kdim"],
)
def test_mha_xavier_init(d: int, h: int, head_dim: int | None, kdim: int | None) -> None:
    mha = MultiHeadAttention(d, h, head_dim=head_dim, kdim=kdim, vdim=kdim)
    inner = h * mha.head_dim
    if mha._same_dims:
        blocks = list(zip(mha.in_proj.weight.split(inner), (d, d, d)))
        biases = [mha.in_proj.bias]
        assert mha.in_proj.weight.shape == (3 * inner, d)
    else:
        blocks = [(mha.q_proj.weight, d), (mha.k_proj.weight, kdim), (mha.v_proj.weight, kdim)]
        biases = [mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]
    blocks.append((mha.out_proj.weight, inner))
    biases.append(mha.out_proj.bias)
    for w, fan_in in blocks:
        bound = _xavier_bound(w.shape[0], fan_in)
        assert w.shape[1] == fan_in
        assert w.abs().max() <= bound
        # each block is initialised on its own (not as one [3*inner, D] matrix): it fills its bound
        assert w.abs().max() > 0.9 * bound
        assert abs(w.std().item() - bound / math.sqrt(3)) < 0.15 * bound
    for b in biases:
        assert (b == 0).all()


# --------------------------------------------------------------------------- KVCache


@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1], [7]])
def test_mha_cache_step_by_step_equals_full_causal(chunks: list[int]) -> None:
    mha = MultiHeadAttention(8, 2)
    _perturb_biases(mha)
    x = torch.randn(2, sum(chunks), 8)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True)
        cache = KVCache()
        outs, start = [], 0
        for n in chunks:
            out, w = mha(x[:, start : start + n], is_causal=True, cache=cache, need_weights=True)
            start += n
            assert cache.length == start
            assert w.shape == (2, 2, n, start)
            outs.append(out)
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-5)


def test_kvcache_growth_past_initial_capacity() -> None:
    cache = KVCache()
    assert cache.empty and cache.keys is None
    ks, vs = [], []
    for n in [5, 1, 12, 50, 3, 1]:  # the first buffer holds 16; 50 more than doubles it
        k, v = torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 6)
        ks.append(k)
        vs.append(v)
        all_k, all_v = cache.append(k, v)
        assert torch.equal(all_k, torch.cat(ks, -2))
        assert torch.equal(all_v, torch.cat(vs, -2))
    assert cache.length == 72
    assert not cache.empty
    assert torch.equal(cache.keys, torch.cat(ks, -2))
    assert torch.equal(cache.values, torch.cat(vs, -2))


def test_kvcache_reorder() -> None:
    cache = KVCache()
    k, v = torch.randn(3, 2, 4, 4), torch.randn(3, 2, 4, 4)
    cache.append(k, v)
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    assert torch.equal(cache.keys, k[index])
    assert torch.equal(cache.values, v[index])
    # appending after a reorder continues each (reordered) row
    k2, v2 = torch.randn(4, 2, 1, 4), torch.randn(4, 2, 1, 4)
    all_k, all_v = cache.append(k2, v2)
    assert torch.equal(all_k, torch.cat([k[index], k2], -2))
    assert torch.equal(all_v, torch.cat([v[index], v2], -2))


def test_kvcache_reorder_matches_decoding_the_selected_rows() -> None:
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(3, 5, 8)
    index = torch.tensor([2, 2, 0])
    with torch.no_grad():
        cache = KVCache()
        mha(x[:, :3], is_causal=True, cache=cache)
        cache.reorder(index)
        step, _ = mha(x[index, 3:], is_causal=True, cache=cache)
        full, _ = mha(x[index], is_causal=True)
    assert torch.allclose(step, full[:, 3:], atol=1e-5)


def test_static_cache_for_cross_attention() -> None:
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    cache = KVCache(static=True)
    with torch.no_grad():
        first, _ = mha(x[:, :2], memory, cache=cache)
        assert cache.length == 6
        second, _ = mha(x[:, 2:], cache=cache)  # memory not needed any more
        third, _ = mha(x[:, 2:], memory * 0, cache=cache)  # the cached memory wins
        full, _ = mha(x, memory)
    assert cache.length == 6
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-6)
    assert torch.allclose(third, second)


def test_cached_self_attention_supports_backward() -> None:
    """Decoding step by step with a cache while gradients are on (e.g. to train through sampled
    sequences) must give the same gradients as the full causal pass."""
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8, requires_grad=True)
    full, _ = mha(x, is_causal=True)
    (grad_full,) = torch.autograd.grad(full.square().sum(), x)

    cache = KVCache()
    steps = [mha(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(5)]
    stepped = torch.cat(steps, 1)
    assert torch.allclose(stepped, full, atol=1e-5)
    (grad_steps,) = torch.autograd.grad(stepped.square().sum(), x)
    assert torch.allclose(grad_steps, grad_full, atol=1e-5)


def test_decoder_cache_reorder_matches_decoding_the_selected_rows() -> None:
    dec = TransformerDecoder(StackSpec(8, 2, 16, 0.0, norm_first=True, num_layers=2)).eval()
    x, memory = torch.randn(3, 5, 8), torch.randn(3, 4, 8)
    index = torch.tensor([2, 0, 2, 1])  # beams: rows may be dropped and duplicated
    with torch.no_grad():
        cache = dec.new_cache()
        dec(x[:, :3], memory, cache=cache)
        cache.reorder(index)
        assert cache.length == 3
        step = dec(x[index, 3:], cache=cache)  # the cross-attention cache holds the memory
        full = dec(x[index], memory[index])
    assert torch.allclose(step, full[:, 3:], atol=1e-5)


# --------------------------------------------------------------------------- attention maps of the stacks


def test_encoder_attention_maps() -> None:
    enc = TransformerEncoder(StackSpec(8, 2, 16, dropout=0.1, num_layers=2)).eval()
    x = torch.randn(2, 5, 8)
    kpm = padding_mask(torch.tensor([5, 3]))
    with torch.no_grad():
        out, maps = enc.forward_with_attention(x, key_padding_mask=kpm, is_causal=True)
        same = enc.get_attention_maps(x, key_padding_mask=kpm, is_causal=True)
        plain = enc(x, key_padding_mask=kpm, is_causal=True)
    assert len(maps) == 2
    assert torch.allclose(out, plain, atol=1e-6)
    allowed = kpm[:, None, None, :] & torch.ones(5, 5, dtype=torch.bool).tril()
    for w, w2 in zip(maps, same, strict=True):
        assert w.shape == (2, 2, 5, 5)
        assert torch.equal(w, w2)
        assert (w.masked_select(~allowed.expand_as(w)) == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5))


def test_decoder_attention_maps() -> None:
    dec = TransformerDecoder(StackSpec(8, 2, 16, dropout=0.0, num_layers=2)).eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    mem_kpm = padding_mask(torch.tensor([6, 2]))
    with torch.no_grad():
        out, self_maps, cross_maps = dec.forward_with_attention(x, memory, memory_key_padding_mask=mem_kpm)
        maps = dec.get_attention_maps(x, memory, memory_key_padding_mask=mem_kpm)
        plain = dec(x, memory, memory_key_padding_mask=mem_kpm)
    assert torch.allclose(out, plain, atol=1e-6)
    assert set(maps) == {"self", "cross"}
    assert len(self_maps) == len(cross_maps) == 2
    for w, w2 in zip(self_maps, maps["self"], strict=True):
        assert w.shape == (2, 2, 4, 4)
        assert torch.equal(w, w2)
        assert (w.triu(1) == 0).all()  # causal by default
    for w, w2 in zip(cross_maps, maps["cross"], strict=True):
        assert w.shape == (2, 2, 4, 6)
        assert torch.equal(w, w2)
        assert (w[1, :, :, 2:] == 0).all()
    gpt = TransformerDecoder(StackSpec(8, 2, 16, cross_attention=False, num_layers=1)).eval()
    assert gpt.get_attention_maps(x)["cross"] == []
