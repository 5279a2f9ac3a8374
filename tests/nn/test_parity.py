"""Numerical parity with the reference ``torch.nn`` implementations.

Weights are copied from attnkit modules into the torch modules, then both are run on the same
inputs. attnkit masks mean True = may attend; torch.nn boolean masks mean True = blocked, so
torch gets ``~mask``. Tolerance: max abs diff <= 1e-5 in fp32.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnkit.nn import (
    BlockSpec,
    DecoderBlock,
    EncoderBlock,
    MultiHeadAttention,
    StackSpec,
    TransformerDecoder,
    TransformerEncoder,
    causal_mask,
    padding_mask,
)

ATOL = 1e-5
D, H, FF = 8, 2, 16

# torch's own warnings about its nested-tensor fast path are not what these tests are about
pytestmark = [
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
]


# --------------------------------------------------------------------------- weight copying


def copy_linear(src: nn.Linear | nn.LayerNorm, dst: nn.Linear | nn.LayerNorm) -> None:
    assert (src.bias is None) == (dst.bias is None), "build both modules with the same `bias`"
    dst.weight.copy_(src.weight)
    if src.bias is not None:
        dst.bias.copy_(src.bias)


copy_layer_norm = copy_linear  # same parameters: weight and optional bias


@torch.no_grad()
def copy_mha(src: MultiHeadAttention, dst: nn.MultiheadAttention) -> None:
    """attnkit's fused ``in_proj`` [3*inner, D] has the layout of torch's ``in_proj_weight``;
    with kdim/vdim != embed_dim both use separate q/k/v projections."""
    if src._same_dims:
        dst.in_proj_weight.copy_(src.in_proj.weight)
        if src.in_proj.bias is not None:
            dst.in_proj_bias.copy_(src.in_proj.bias)
    else:
        dst.q_proj_weight.copy_(src.q_proj.weight)
        dst.k_proj_weight.copy_(src.k_proj.weight)
        dst.v_proj_weight.copy_(src.v_proj.weight)
        if src.q_proj.bias is not None:
            dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
    copy_linear(src.out_proj, dst.out_proj)


@torch.no_grad()
def copy_encoder_block(src: EncoderBlock, dst: nn.TransformerEncoderLayer) -> None:
    copy_mha(src.self_attn, dst.self_attn)
    copy_linear(src.ff.linear1, dst.linear1)
    copy_linear(src.ff.linear2, dst.linear2)
    copy_layer_norm(src.norm1, dst.norm1)
    copy_layer_norm(src.norm2, dst.norm2)


@torch.no_grad()
def copy_decoder_block(src: DecoderBlock, dst: nn.TransformerDecoderLayer) -> None:
    assert src.cross_attn is not None and src.norm2 is not None
    copy_mha(src.self_attn, dst.self_attn)
    copy_mha(src.cross_attn, dst.multihead_attn)
    copy_linear(src.ff.linear1, dst.linear1)
    copy_linear(src.ff.linear2, dst.linear2)
    copy_layer_norm(src.norm1, dst.norm1)
    copy_layer_norm(src.norm2, dst.norm2)
    copy_layer_norm(src.norm3, dst.norm3)


@torch.no_grad()
def copy_transformer(enc: TransformerEncoder, dec: TransformerDecoder, dst: nn.Transformer) -> None:
    assert enc.norm is not None and dec.norm is not None, "nn.Transformer always has final norms"
    for a, t in zip(enc.layers, dst.encoder.layers, strict=True):
        copy_encoder_block(a, t)
    for a, t in zip(dec.layers, dst.decoder.layers, strict=True):
        copy_decoder_block(a, t)
    copy_layer_norm(enc.norm, dst.encoder.norm)
    copy_layer_norm(dec.norm, dst.decoder.norm)


# --------------------------------------------------------------------------- helpers


def randomize_(module: nn.Module) -> nn.Module:
    """Non-trivial LayerNorm affine parameters and biases (attnkit initialises them to 1 and 0)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias") or ".norm" in name or name.startswith("norm"):
                p.add_(0.1 * torch.randn_like(p))
    return module


def max_diff(a: Tensor, b: Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def mask_with_first_key(tq: int, tk: int) -> Tensor:
    """A random attn mask (True = may attend) where every query may see key 0, which is always a
    real (right-padded) token: no query row is fully masked (torch would give NaN there)."""
    m = torch.rand(tq, tk) > 0.4
    m[:, 0] = True
    return m


def set_mode(train: bool, *modules: nn.Module) -> None:
    for m in modules:
        m.train(train)


# --------------------------------------------------------------------------- MultiheadAttention


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "attn", "both"])
def test_mha_self_attention_parity(train: bool, mask_kind: str) -> None:
    ours = randomize_(MultiHeadAttention(D, H))
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    copy_mha(ours, ref)
    set_mode(train, ours, ref)

    x = torch.randn(3, 6, D)
    kpm = padding_mask(torch.tensor([6, 4, 2])) if mask_kind in ("padding", "both") else None
    am = mask_with_first_key(6, 6) if mask_kind in ("attn", "both") else None

    with torch.no_grad():
        out, w = ours(x, attn_mask=am, key_padding_mask=kpm, need_weights=True)
        out_fused, w_none = ours(x, attn_mask=am, key_padding_mask=kpm)
        ref_out, ref_w = ref(
            x,
            x,
            x,
            attn_mask=None if am is None else ~am,
            key_padding_mask=None if kpm is None else ~kpm,
            need_weights=True,
            average_attn_weights=False,
        )
    assert w_none is None
    assert w.shape == (3, H, 6, 6)
    assert max_diff(out, ref_out) <= ATOL
    assert max_diff(out_fused, ref_out) <= ATOL
    assert max_diff(w, ref_w) <= ATOL


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_mha_cross_attention_parity(train: bool) -> None:
    ours = randomize_(MultiHeadAttention(D, H))
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    copy_mha(ours, ref)
    set_mode(train, ours, ref)

    x = torch.randn(2, 4, D)
    memory = torch.randn(2, 7, D)  # a different length from the queries
    kpm = padding_mask(torch.tensor([7, 3]))
    am = mask_with_first_key(4, 7)

    with torch.no_grad():
        out, w = ours(x, memory, attn_mask=am, key_padding_mask=kpm, need_weights=True)
        out_fused, _ = ours(x, memory, attn_mask=am, key_padding_mask=kpm)
        ref_out, ref_w = ref(
            x, memory, memory, attn_mask=~am, key_padding_mask=~kpm, need_weights=True, average_attn_weights=False
        )
    assert w.shape == (2, H, 4, 7)
    assert max_diff(out, ref_out) <= ATOL
    assert max_diff(out_fused, ref_out) <= ATOL
    assert max_diff(w, ref_w) <= ATOL


def test_mha_per_batch_and_per_head_masks_match_torch_3d_masks() -> None:
    """attnkit's [B, Tq, Tk] and [B, H, Tq, Tk] masks correspond to torch's [B*H, Tq, Tk] masks
    (batch-major, head-minor): this also checks that the head order is the same."""
    b, tq, tk = 2, 3, 5
    ours = randomize_(MultiHeadAttention(D, H))
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    copy_mha(ours, ref)
    x, memory = torch.randn(b, tq, D), torch.randn(b, tk, D)

    per_head = torch.rand(b, H, tq, tk) > 0.5
    per_head[..., 0] = True
    per_batch = torch.rand(b, tq, tk) > 0.5
    per_batch[..., 0] = True
    cases = [
        (per_head, per_head.reshape(b * H, tq, tk)),
        (per_batch, per_batch.repeat_interleave(H, dim=0)),
    ]
    for ours_mask, torch_mask in cases:
        with torch.no_grad():
            out, w = ours(x, memory, attn_mask=ours_mask, need_weights=True)
            ref_out, ref_w = ref(x, memory, memory, attn_mask=~torch_mask, average_attn_weights=False)
        assert max_diff(out, ref_out) <= ATOL
        assert max_diff(w, ref_w) <= ATOL


def test_mha_kdim_vdim_parity() -> None:
    ours = randomize_(MultiHeadAttention(D, H, kdim=5, vdim=5))
    ref = nn.MultiheadAttention(D, H, kdim=5, vdim=5, batch_first=True)
    copy_mha(ours, ref)
    x, memory = torch.randn(2, 3, D), torch.randn(2, 4, 5)
    kpm = padding_mask(torch.tensor([4, 2]))
    with torch.no_grad():
        out, w = ours(x, memory, key_padding_mask=kpm, need_weights=True)
        ref_out, ref_w = ref(x, memory, memory, key_padding_mask=~kpm, average_attn_weights=False)
    assert max_diff(out, ref_out) <= ATOL
    assert max_diff(w, ref_w) <= ATOL


# --------------------------------------------------------------------------- encoder / decoder layers


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("masks", ["padding", "causal", "padding+causal"])
def test_encoder_layer_parity(train: bool, norm_first: bool, masks: str) -> None:
    ours = randomize_(EncoderBlock(BlockSpec(D, H, FF, dropout=0.0, norm_first=norm_first)))
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    copy_encoder_block(ours, ref)
    set_mode(train, ours, ref)

    lengths = torch.tensor([5, 3, 1])
    x = torch.randn(3, 5, D)
    kpm = padding_mask(lengths) if "padding" in masks else None
    causal = "causal" in masks
    with torch.no_grad():
        out, _ = ours(x, key_padding_mask=kpm, is_causal=causal)
        ref_out = ref(
            x,
            src_mask=~causal_mask(5) if causal else None,
            src_key_padding_mask=None if kpm is None else ~kpm,
            is_causal=causal,
        )
    if ref_out.is_nested:
        ref_out = ref_out.to_padded_tensor(0.0, out.shape)
    # torch's eval fast path may return zeros at padded query positions, so compare only the
    # real (non-padded) positions when there is a padding mask.
    real = kpm if kpm is not None else torch.ones(3, 5, dtype=torch.bool)
    assert max_diff(out[real], ref_out[real]) <= ATOL
    if train:  # no fast path in training mode: padded positions agree too
        assert max_diff(out, ref_out) <= ATOL


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_parity(train: bool, norm_first: bool) -> None:
    ours = randomize_(DecoderBlock(BlockSpec(D, H, FF, dropout=0.0, norm_first=norm_first)))
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    copy_decoder_block(ours, ref)
    set_mode(train, ours, ref)

    tgt, memory = torch.randn(3, 5, D), torch.randn(3, 7, D)
    tgt_kpm = padding_mask(torch.tensor([5, 2, 4]))
    mem_kpm = padding_mask(torch.tensor([7, 7, 3]))
    mem_mask = mask_with_first_key(5, 7)
    with torch.no_grad():
        # attnkit adds the causal mask itself (tgt_is_causal=True is the default) ...
        out, _, _ = ours(
            tgt, memory, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm, memory_mask=mem_mask
        )
        # ... and gives the same result from an explicit causal tgt_mask
        out_explicit, _, _ = ours(
            tgt,
            memory,
            tgt_mask=causal_mask(5),
            tgt_is_causal=False,
            tgt_key_padding_mask=tgt_kpm,
            memory_key_padding_mask=mem_kpm,
            memory_mask=mem_mask,
        )
        ref_out = ref(
            tgt,
            memory,
            tgt_mask=~causal_mask(5),
            memory_mask=~mem_mask,
            tgt_key_padding_mask=~tgt_kpm,
            memory_key_padding_mask=~mem_kpm,
            tgt_is_causal=True,
        )
    # The decoder layer has no fast path; compare real target positions (and, in training mode,
    # every position: padded queries still see key 0 through the causal mask).
    assert max_diff(out[tgt_kpm], ref_out[tgt_kpm]) <= ATOL
    assert max_diff(out_explicit, out) <= ATOL
    if train:
        assert max_diff(out, ref_out) <= ATOL


# --------------------------------------------------------------------------- whole nn.Transformer


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_full_transformer_parity(train: bool, norm_first: bool) -> None:
    # nn.Transformer always ends its encoder and its decoder with a LayerNorm, even post-norm,
    # so the attnkit stacks are built with final_norm=True.
    enc = randomize_(TransformerEncoder(StackSpec(D, H, FF, 0.0, norm_first=norm_first, final_norm=True, num_layers=2)))
    dec = randomize_(TransformerDecoder(StackSpec(D, H, FF, 0.0, norm_first=norm_first, final_norm=True, num_layers=2)))
    ref = nn.Transformer(
        D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.0,
        batch_first=True, norm_first=norm_first,
    )  # fmt: skip
    copy_transformer(enc, dec, ref)
    set_mode(train, enc, dec, ref)

    src, tgt = torch.randn(3, 6, D), torch.randn(3, 5, D)
    src_kpm = padding_mask(torch.tensor([6, 4, 2]))
    tgt_kpm = padding_mask(torch.tensor([5, 5, 3]))
    with torch.no_grad():
        memory = enc(src, key_padding_mask=src_kpm)
        out = dec(tgt, memory, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
        ref_memory = ref.encoder(src, src_key_padding_mask=~src_kpm)
        ref_out = ref(
            src,
            tgt,
            tgt_mask=~causal_mask(5),
            src_key_padding_mask=~src_kpm,
            tgt_key_padding_mask=~tgt_kpm,
            memory_key_padding_mask=~src_kpm,
            tgt_is_causal=True,
        )
    if ref_memory.is_nested:
        ref_memory = ref_memory.to_padded_tensor(0.0, memory.shape)
    # In eval mode torch's encoder may run on nested tensors and give zeros at padded source
    # positions: compare the memory at real positions only. Padded memory positions are masked
    # out of the cross-attention, so the decoder outputs must agree; compare real target positions.
    assert max_diff(memory[src_kpm], ref_memory[src_kpm]) <= ATOL
    assert max_diff(out[tgt_kpm], ref_out[tgt_kpm]) <= ATOL
    if train:
        assert max_diff(memory, ref_memory) <= ATOL
        assert max_diff(out, ref_out) <= ATOL


# --------------------------------------------------------------------------- variants


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize(("activation", "bias"), [("gelu", True), ("relu", False)], ids=["gelu", "no_bias"])
def test_block_variants_parity(norm_first: bool, activation: str, bias: bool) -> None:
    """GELU activation and bias-free blocks (linears and LayerNorms) match torch's too."""
    kw = dict(dropout=0.0, activation=activation, norm_first=norm_first, bias=bias)
    enc = randomize_(EncoderBlock(BlockSpec(D, H, FF, **kw)))
    dec = randomize_(DecoderBlock(BlockSpec(D, H, FF, **kw)))
    ref_enc = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, **kw)
    ref_dec = nn.TransformerDecoderLayer(D, H, FF, batch_first=True, **kw)
    copy_encoder_block(enc, ref_enc)
    copy_decoder_block(dec, ref_dec)
    x, memory = torch.randn(2, 4, D), torch.randn(2, 6, D)
    kpm, mem_kpm = padding_mask(torch.tensor([4, 2])), padding_mask(torch.tensor([6, 3]))
    with torch.no_grad():
        out, _ = enc(x, key_padding_mask=kpm)
        ref_out = ref_enc(x, src_key_padding_mask=~kpm)
        dout, _, _ = dec(x, memory, memory_key_padding_mask=mem_kpm)
        ref_dout = ref_dec(x, memory, tgt_mask=~causal_mask(4), memory_key_padding_mask=~mem_kpm)
    assert max_diff(out, ref_out) <= ATOL
    assert max_diff(dout, ref_dout) <= ATOL


def test_mha_without_bias_cross_attention_parity() -> None:
    ours = MultiHeadAttention(D, H, bias=False)
    ref = nn.MultiheadAttention(D, H, bias=False, batch_first=True)
    assert ref.in_proj_bias is None
    copy_mha(ours, ref)
    x, memory = torch.randn(2, 3, D), torch.randn(2, 5, D)
    with torch.no_grad():
        out, _ = ours(x, memory)
        ref_out, _ = ref(x, memory, memory)
    assert max_diff(out, ref_out) <= ATOL


def test_final_norm_defaults() -> None:
    """Pre-norm stacks end with a LayerNorm by default, post-norm stacks do not; final_norm overrides."""
    assert TransformerEncoder(StackSpec(D, H, FF, norm_first=True, num_layers=1)).norm is not None
    assert TransformerEncoder(StackSpec(D, H, FF, norm_first=False, num_layers=1)).norm is None
    assert TransformerDecoder(StackSpec(D, H, FF, norm_first=True, num_layers=1)).norm is not None
    assert TransformerDecoder(StackSpec(D, H, FF, norm_first=False, num_layers=1)).norm is None
    assert TransformerEncoder(StackSpec(D, H, FF, norm_first=False, final_norm=True, num_layers=1)).norm is not None
    assert TransformerDecoder(StackSpec(D, H, FF, norm_first=True, final_norm=False, num_layers=1)).norm is None
