"""Property-based tests (hypothesis) of the encoder and decoder stacks."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from attnkit.nn import StackSpec, TransformerDecoder, TransformerEncoder, padding_mask

ATOL = 1e-5
# The exactness properties (equivariance, causality, padding) run in float64: with few features a
# LayerNorm of nearly equal values amplifies float32 rounding past any fixed tolerance, which
# would make the properties flaky without being a bug. Cached decoding is checked in float32.
EXACT = torch.float64

seeds = st.integers(min_value=0, max_value=2**31 - 1)
batches = st.integers(min_value=1, max_value=3)
lengths = st.integers(min_value=1, max_value=6)
heads = st.sampled_from([1, 2])
head_dims = st.sampled_from([4, 8])
num_layers = st.integers(min_value=1, max_value=2)
flags = st.booleans()


def _encoder(seed: int, layers: int, h: int, hd: int, norm_first: bool) -> TransformerEncoder:
    torch.manual_seed(seed)
    d = h * hd
    # dropout > 0 on purpose: eval mode must switch it off
    return (
        TransformerEncoder(StackSpec(d, h, 2 * d, dropout=0.2, norm_first=norm_first, num_layers=layers))
        .eval()
        .to(EXACT)
    )


def _decoder(
    seed: int, layers: int, h: int, hd: int, norm_first: bool, cross: bool, rotary: bool = False, dtype=EXACT
) -> TransformerDecoder:
    torch.manual_seed(seed)
    d = h * hd
    dec = TransformerDecoder(
        StackSpec(
            d,
            h,
            2 * d,
            dropout=0.2,
            norm_first=norm_first,
            cross_attention=cross,
            positional="rotary" if rotary else "none",
            num_layers=layers,
        )
    )
    return dec.eval().to(dtype)


def _lengths(g: torch.Generator, batch: int, t: int) -> Tensor:
    """Random lengths in [1, t] (every sequence has a real token)."""
    return torch.randint(1, t + 1, (batch,), generator=g)


def _max_diff(a: Tensor, b: Tensor) -> float:
    return 0.0 if a.numel() == 0 else (a - b).abs().max().item()


@settings(max_examples=25, deadline=None)
@given(seed=seeds, b=batches, t=lengths, h=heads, hd=head_dims, layers=num_layers, norm_first=flags, padded=flags)
def test_encoder_is_permutation_equivariant(
    seed: int, b: int, t: int, h: int, hd: int, layers: int, norm_first: bool, padded: bool
) -> None:
    """Without positional encoding, permuting the positions permutes the outputs (the padding
    mask permuted along)."""
    enc = _encoder(seed, layers, h, hd, norm_first)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, h * hd, generator=g, dtype=EXACT)
    perm = torch.randperm(t, generator=g)
    kpm = padding_mask(_lengths(g, b, t), t) if padded else None
    with torch.no_grad():
        out = enc(x, key_padding_mask=kpm)
        out_perm = enc(x[:, perm], key_padding_mask=None if kpm is None else kpm[:, perm])
    assert _max_diff(out_perm, out[:, perm]) <= ATOL


@settings(max_examples=25, deadline=None)
@given(seed=seeds, b=batches, t=lengths, h=heads, hd=head_dims, layers=num_layers, norm_first=flags, data=st.data())
def test_causal_outputs_ignore_the_future(
    seed: int, b: int, t: int, h: int, hd: int, layers: int, norm_first: bool, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=t - 1), label="cut")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, h * hd, generator=g, dtype=EXACT)
    x_changed = x.clone()
    x_changed[:, cut + 1 :] = torch.randn(b, t - cut - 1, h * hd, generator=g, dtype=EXACT) * 3
    enc = _encoder(seed, layers, h, hd, norm_first)
    gpt = _decoder(seed, layers, h, hd, norm_first, cross=False)
    with torch.no_grad():
        a, a2 = enc(x, is_causal=True), enc(x_changed, is_causal=True)
        c, c2 = gpt(x), gpt(x_changed)  # the decoder is causal by default
    assert _max_diff(a[:, : cut + 1], a2[:, : cut + 1]) <= ATOL
    assert _max_diff(c[:, : cut + 1], c2[:, : cut + 1]) <= ATOL


@settings(max_examples=25, deadline=None)
@given(seed=seeds, b=batches, t=lengths, h=heads, hd=head_dims, layers=num_layers, norm_first=flags, causal=flags)
def test_encoder_real_positions_ignore_padded_inputs(
    seed: int, b: int, t: int, h: int, hd: int, layers: int, norm_first: bool, causal: bool
) -> None:
    enc = _encoder(seed, layers, h, hd, norm_first)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, h * hd, generator=g, dtype=EXACT)
    kpm = padding_mask(_lengths(g, b, t), t)
    x_changed = torch.where(kpm[..., None], x, torch.randn(x.shape, generator=g, dtype=EXACT) * 5)
    with torch.no_grad():
        out = enc(x, key_padding_mask=kpm, is_causal=causal)
        out2 = enc(x_changed, key_padding_mask=kpm, is_causal=causal)
    assert _max_diff(out[kpm], out2[kpm]) <= ATOL


@settings(max_examples=25, deadline=None)
@given(seed=seeds, b=batches, t=lengths, tm=lengths, h=heads, hd=head_dims, layers=num_layers, norm_first=flags)
def test_decoder_ignores_padded_memory(
    seed: int, b: int, t: int, tm: int, h: int, hd: int, layers: int, norm_first: bool
) -> None:
    dec = _decoder(seed, layers, h, hd, norm_first, cross=True)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, h * hd, generator=g, dtype=EXACT)
    memory = torch.randn(b, tm, h * hd, generator=g, dtype=EXACT)
    mem_kpm = padding_mask(_lengths(g, b, tm), tm)
    memory_changed = torch.where(mem_kpm[..., None], memory, torch.randn(memory.shape, generator=g, dtype=EXACT) * 5)
    with torch.no_grad():
        out = dec(x, memory, memory_key_padding_mask=mem_kpm)
        out2 = dec(x, memory_changed, memory_key_padding_mask=mem_kpm)
    assert _max_diff(out, out2) <= ATOL


@settings(max_examples=25, deadline=None)
@given(
    seed=seeds,
    b=batches,
    h=heads,
    hd=head_dims,
    layers=num_layers,
    norm_first=flags,
    cross=flags,
    rotary=flags,
    tgt_padded=flags,
    chunks=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4),
    tm=lengths,
)
def test_cached_decoding_equals_full_forward(
    seed: int,
    b: int,
    h: int,
    hd: int,
    layers: int,
    norm_first: bool,
    cross: bool,
    rotary: bool,
    tgt_padded: bool,
    chunks: list[int],
    tm: int,
) -> None:
    """Decoding in chunks (one token or several at a time) with a cache equals one full pass."""
    dec = _decoder(seed, layers, h, hd, norm_first, cross, rotary, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    t, d = sum(chunks), h * hd
    x = torch.randn(b, t, d, generator=g)
    memory = torch.randn(b, tm, d, generator=g) if cross else None
    mem_kpm = padding_mask(_lengths(g, b, tm), tm) if cross else None
    tgt_kpm = torch.rand(b, t, generator=g) > 0.3 if tgt_padded else None
    with torch.no_grad():
        full = dec(x, memory, memory_key_padding_mask=mem_kpm, tgt_key_padding_mask=tgt_kpm)
        cache = dec.new_cache()
        outs, start = [], 0
        for n in chunks:
            end = start + n
            outs.append(
                dec(
                    x[:, start:end],
                    memory,
                    memory_key_padding_mask=mem_kpm,
                    tgt_key_padding_mask=None if tgt_kpm is None else tgt_kpm[:, :end],
                    cache=cache,
                )
            )
            start = end
            assert cache.length == end
    assert torch.isfinite(full).all()
    assert _max_diff(torch.cat(outs, 1), full) <= ATOL
