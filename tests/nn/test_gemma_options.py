"""The block and stack options Gemma 3 added to attnkit.nn (and the language model's ``embed_scale``), each against
transformers' own Gemma 3 module where there is one, and each wrong value refused with a message that says why.

The options are off by default and then build nothing: a model without them has the modules and the tensors it had.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from transformers.models.gemma3 import modeling_gemma3 as hf

from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.models.lens import logit_attribution
from attnkit.nn import (
    BlockSpec,
    DecoderBlock,
    FeedForward,
    MultiHeadAttention,
    OffsetRMSNorm,
    StackSpec,
    TransformerDecoder,
    band_mask,
    make_norm,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_offset_rmsnorm_is_gemmas(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    ours, theirs = make_norm("rmsnorm_offset", 16, eps=1e-6), hf.Gemma3RMSNorm(16, eps=1e-6)
    assert isinstance(ours, OffsetRMSNorm) and not ours.weight.any()  # 1 + 0: the identity scale at first
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    x = (torch.randn(2, 5, 16) * 30).to(dtype)
    assert torch.equal(ours(x), theirs(x))  # 1 + weight in float32, one cast at the end
    with pytest.raises(ValueError, match=r"x has 8 features .*expected 16"):
        ours(x[..., :8])


def test_geglu_tanh_is_gemmas_mlp() -> None:
    torch.manual_seed(0)
    ff = FeedForward(8, 12, activation="geglu_tanh", bias=False)
    x = torch.randn(2, 3, 8)
    gate, up = ff.linear1(x).chunk(2, dim=-1)
    expected = ff.linear2(F.gelu(gate, approximate="tanh") * up)
    torch.testing.assert_close(ff(x), expected, rtol=0, atol=0)
    assert ff.linear1.weight.shape == (24, 8)  # gate rows, then up rows


@pytest.mark.parametrize("need_weights", [False, True])
def test_attention_scale(need_weights: bool) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, scale=0.1, bias=False).eval()
    x = torch.randn(1, 5, 16)
    q, k, v = attn.in_proj(x).view(1, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
    weights = torch.softmax(q @ k.transpose(-1, -2) * 0.1, dim=-1)  # not 8 ** -0.5
    expected = attn.out_proj((weights @ v).transpose(1, 2).reshape(1, 5, 16))
    out, got = attn(x, need_weights=need_weights)
    torch.testing.assert_close(out, expected)
    if need_weights:
        torch.testing.assert_close(got, weights)
    for bad in (0.0, -1.0):
        with pytest.raises(
            ValueError, match=r"scale must be positive \(or None: head_dim \*\* -0.5\), got " + str(bad)
        ):
            MultiHeadAttention(16, 2, scale=bad)


def test_sandwich_norm_norms_each_sublayer_output() -> None:
    spec = BlockSpec(8, 2, dim_feedforward=16, dropout=0.0, norm="rmsnorm_offset", norm_first=True, bias=False,
                     cross_attention=False, sandwich_norm=True)  # fmt: skip
    torch.manual_seed(0)
    block = DecoderBlock(spec).eval()
    assert block.attn_out_norm is not None and block.mlp_out_norm is not None and block.norm3 is not None
    with torch.no_grad():
        for p in block.parameters():
            p.normal_()
    x = torch.randn(2, 4, 8)
    a = block.attn_out_norm(block.self_attn(block.norm1(x), is_causal=True)[0])
    h = x + a
    expected = h + block.mlp_out_norm(block.ff(block.norm3(h)))
    torch.testing.assert_close(block(x)[0], expected)
    plain = DecoderBlock(BlockSpec(8, 2, norm_first=True, cross_attention=False))
    assert plain.attn_out_norm is None and plain.mlp_out_norm is None  # off: nothing built
    with pytest.raises(ValueError, match=r"sandwich_norm=True needs norm_first=True"):
        DecoderBlock(BlockSpec(8, 2, cross_attention=False, sandwich_norm=True))
    with pytest.raises(ValueError, match=r"sandwich_norm=True is for blocks without cross-attention"):
        DecoderBlock(BlockSpec(8, 2, norm_first=True, sandwich_norm=True))


def _stack(**fields: object) -> TransformerDecoder:
    spec = StackSpec(d_model=8, num_heads=2, num_layers=4, dim_feedforward=16, dropout=0.0, norm_first=True,
                     cross_attention=False, positional="rotary", **fields)  # fmt: skip
    torch.manual_seed(0)
    return TransformerDecoder(spec).eval()


def test_interleaved_windows_and_rotary_bases() -> None:
    stack = _stack(sliding_window=2, sliding_window_pattern=2, rope_local_theta=100.0)
    assert stack.global_layers == {1, 3}  # every second layer global, as Gemma 3's layer_types with a pattern of 2
    rotary = [layer.self_attn.rotary for layer in stack.layers]
    assert [r.base for r in rotary] == [100.0, 10000.0, 100.0, 10000.0]
    # Each layer computes what it computes alone with its own window (the sliding ones) or none (the global ones),
    # and its own rotary positions (the block's rotary embedding, checked above).
    x = torch.randn(2, 7, 8)
    h = x
    for i, layer in enumerate(stack.layers):
        h = layer(h, tgt_mask=band_mask(7, 7, causal=True, window=None if i % 2 else 2))[0]
    torch.testing.assert_close(stack(x), stack.norm(h))
    assert not torch.allclose(stack(x), _stack(sliding_window=2, sliding_window_pattern=2)(x))  # the local base counts
    cache = stack.new_cache()  # cached decoding: the same positions, windows and bases
    steps = [stack(x[:, :4], cache=cache), stack(x[:, 4:5], cache=cache), stack(x[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(steps, dim=1), stack(x))
    assert _stack(sliding_window=2).global_layers == frozenset()  # off: one prepared mask for every layer


def test_interleaving_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"sliding_window_pattern=2 needs a sliding_window and a pattern >= 2"):
        _stack(sliding_window_pattern=2)
    with pytest.raises(ValueError, match=r"sliding_window_pattern=1 needs"):
        _stack(sliding_window=2, sliding_window_pattern=1)
    with pytest.raises(ValueError, match=r"rope_local_theta=100.0 is the sliding layers' rotary base: it needs"):
        _stack(sliding_window=2, rope_local_theta=100.0)
    arch = dict(vocab_size=16, d_model=8, num_heads=2, positional="rotary")
    with pytest.raises(ValidationError, match=r"sliding_window_pattern=3 interleaves .*set sliding_window too"):
        LanguageModelConfig(**arch, sliding_window_pattern=3)
    with pytest.raises(ValidationError, match=r"rope_local_theta is the sliding layers' rotary base"):
        LanguageModelConfig(**arch, sliding_window=4, rope_local_theta=10.0)
    with pytest.raises(ValidationError, match=r"sandwich_norm=true .* needs norm_first=true"):
        LanguageModelConfig(**arch, sandwich_norm=True, norm_first=False)
    with pytest.raises(ValidationError, match=r"attn_scale\n  Input should be greater than 0"):
        LanguageModelConfig(**arch, attn_scale=0.0)
    with pytest.raises(ValidationError, match=r"sliding_window_pattern\n  Input should be greater than or equal to 2"):
        LanguageModelConfig(**arch, sliding_window=4, sliding_window_pattern=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embed_scale_rounds_as_transformers(dtype: torch.dtype) -> None:
    config = LanguageModelConfig(vocab_size=50, d_model=24, num_heads=2, num_layers=1, embed_scale=True)
    lm = LanguageModel(config).to(dtype)
    theirs = hf.Gemma3TextScaledWordEmbedding(50, 24, 0, embed_scale=24**0.5).to(dtype)
    theirs.weight.data.copy_(lm.token_embedding.weight.data)
    seen: list[torch.Tensor] = []
    lm.hook_embed.add_hook(lambda t, hook: seen.append(t))
    ids = torch.arange(50).view(2, 25)
    lm(ids)
    assert torch.equal(seen[0], theirs(ids))  # sqrt(24) rounded to the dtype first (bfloat16: 4.906, not 4.899)
    if dtype == torch.bfloat16:  # (the unrounded scale gives other embeddings)
        assert not torch.equal(seen[0], lm.token_embedding(ids) * math.sqrt(24))
    plain = LanguageModel(config.model_copy(update={"embed_scale": False}))
    assert set(plain.state_dict()) == set(lm.state_dict())  # the scale is no tensor: the same checkpoint layout


def test_logit_attribution_refuses_sandwich_norms() -> None:
    """Direct attribution reads each head's output through ``out_proj`` into the residual stream; a norm of the
    attention's output in between (Gemma's) would make those parts wrong, so it is refused."""
    config = LanguageModelConfig(vocab_size=16, d_model=8, num_heads=2, num_layers=1, sandwich_norm=True)
    with pytest.raises(ValueError, match=r"sandwich_norm \(Gemma\) norms them"):
        logit_attribution(LanguageModel(config), torch.zeros(1, 3, dtype=torch.long), 1)
    plain = LanguageModel(config.model_copy(update={"sandwich_norm": False}))
    logit_attribution(plain, torch.zeros(1, 3, dtype=torch.long), 1)  # (the same model without them: computed)
