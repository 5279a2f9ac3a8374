"""Attention-only blocks: ``mlp=False`` on :class:`attnkit.nn.BlockSpec` and on the language model's config."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from attnkit.errors import ConfigError
from attnkit.interop import load_pretrained
from attnkit.interop.export import save_model
from attnkit.interop.hf_export import export_hf
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.models.lens import logit_attribution
from attnkit.nn import BlockSpec, DecoderBlock, EncoderBlock
from attnkit.nn.hooks import run_with_cache


def attention_by_hand(block: DecoderBlock, x: torch.Tensor) -> torch.Tensor:
    """Causal multi-head self-attention of ``x [B, T, D]`` from the block's own weights, step by step."""
    attn = block.self_attn
    b, t, d = x.shape
    h, hd = attn.num_heads, attn.head_dim
    q, k, v = (x @ attn.in_proj.weight.T + attn.in_proj.bias).split(d, dim=-1)
    q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    z = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return z @ attn.out_proj.weight.T + attn.out_proj.bias


@pytest.mark.parametrize("norm_first", [True, False])
def test_block_without_mlp_is_attention_and_residual(norm_first):
    torch.manual_seed(0)
    spec = BlockSpec(d_model=16, num_heads=2, dropout=0.0, norm_first=norm_first, cross_attention=False, mlp=False)
    block = DecoderBlock(spec).eval()
    assert block.ff is None and block.norm3 is None
    assert not any("ff." in name or "norm3" in name for name, _ in block.named_parameters())
    with torch.no_grad():  # a LayerNorm that changes something
        block.norm1.weight.uniform_(0.5, 1.5)
        block.norm1.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 5, 16)
    out, _, _ = block(x)
    if norm_first:
        expected = x + attention_by_hand(block, block.norm1(x))
    else:
        expected = block.norm1(x + attention_by_hand(block, x))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_block_without_mlp_hook_mlp_out_carries_zeros_and_adds_what_a_hook_returns():
    torch.manual_seed(0)
    block = DecoderBlock(BlockSpec(d_model=16, num_heads=2, dropout=0.0, cross_attention=False, mlp=False)).eval()
    x = torch.randn(2, 5, 16)
    plain, _, _ = block(x)
    seen = []
    block.hook_mlp_out.add_hook(lambda a, hook: seen.append(a))
    same, _, _ = block(x)
    assert len(seen) == 1 and torch.equal(seen[0], torch.zeros_like(x))
    torch.testing.assert_close(same, plain)
    block.hook_mlp_out.fns.clear()
    block.hook_mlp_out.add_hook(lambda a, hook: a + 1.0)
    shifted, _, _ = block(x)
    torch.testing.assert_close(shifted, plain + 1.0)


def test_encoder_block_refuses_mlp_false():
    with pytest.raises(ValueError, match="decoder block option"):
        EncoderBlock(BlockSpec(d_model=16, num_heads=2, mlp=False))


def tiny(**kw) -> LanguageModel:
    cfg = dict(vocab_size=23, d_model=16, num_heads=2, num_layers=2, dropout=0.0, max_len=16, mlp=False)
    return LanguageModel(LanguageModelConfig(**{**cfg, **kw})).eval()


def test_lm_without_mlp_has_no_feedforward_and_attribution_sees_zero_mlps():
    torch.manual_seed(0)
    model = tiny()
    with_mlp = tiny(mlp=True)
    assert all(block.ff is None for block in model.decoder.layers)
    assert not any(".ff." in name for name in model.state_dict())
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in with_mlp.parameters())
    ids = torch.randint(3, 23, (2, 7))
    cache = run_with_cache(model, ids, names="blocks.*.hook_mlp_out")
    assert all(torch.equal(cache[f"blocks.{i}.hook_mlp_out"], torch.zeros(2, 7, 16)) for i in range(2))
    parts = logit_attribution(model, ids, 5)
    assert torch.equal(parts.mlps, torch.zeros(2, 7, 2))
    total = parts.heads.sum(dim=(-1, -2)) + parts.embed + parts.rest
    torch.testing.assert_close(total, parts.total, atol=1e-4, rtol=1e-4)


def test_config_refuses_a_feedforward_width_without_mlp():
    with pytest.raises(ValidationError, match=r"mlp=false builds attention-only blocks.*dim_feedforward=64"):
        LanguageModelConfig(vocab_size=23, d_model=16, num_heads=2, mlp=False, dim_feedforward=64)
    config = LanguageModelConfig(vocab_size=23, d_model=16, num_heads=2, mlp=False)  # the default width: unused
    assert config.stack_spec().mlp is False
    assert LanguageModelConfig(vocab_size=23, d_model=16, num_heads=2).stack_spec().mlp is True


def test_model_folder_round_trip(tmp_path):
    torch.manual_seed(0)
    model = tiny(positional="rotary")
    ids = torch.randint(3, 23, (2, 9))
    folder = save_model(model, tmp_path / "model")
    loaded = load_pretrained(folder).model.eval()
    assert isinstance(loaded, LanguageModel) and loaded.config.mlp is False
    assert loaded.config == model.config
    assert all(block.ff is None for block in loaded.decoder.layers)
    assert torch.equal(loaded(ids), model(ids))


def test_hugging_face_export_refuses_attention_only_blocks(tmp_path):
    with pytest.raises(ConfigError, match=r"attention-only blocks \(mlp=false\).*attnkit model folder"):
        export_hf(tiny(), tmp_path / "hf")
