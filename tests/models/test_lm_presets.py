"""Decoder config: presets, the new architecture fields, and parity of the llama/mistral/qwen2 presets with
Hugging Face transformers' models of the same weights (the block semantics the importer relies on)."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from attnkit.models.lm import PRESETS, LanguageModel, LanguageModelArchitecture, LanguageModelConfig, RopeScaling
from attnkit.nn import RMSNorm
from attnkit.tasks import build_config

SIZES = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=2, dim_feedforward=48, dropout=0.0, max_len=64)


def test_presets_set_the_family() -> None:
    llama = LanguageModelConfig.from_preset("llama", **SIZES)
    assert (llama.norm, llama.activation, llama.positional, llama.bias, llama.tie_weights) == (
        "rmsnorm",
        "swiglu",
        "rotary",
        False,
        False,
    )
    assert LanguageModelConfig.from_preset("mistral", **SIZES).sliding_window == 4096
    qwen = LanguageModelConfig.from_preset("qwen2", **SIZES)
    assert qwen.qkv_bias is True and qwen.bias is False
    gpt2 = LanguageModelConfig.from_preset("gpt2", **SIZES)
    assert (gpt2.activation, gpt2.positional, gpt2.tie_weights) == ("gelu_tanh", "learned", True)
    # overrides win over the preset; the `preset` key works as the task config uses it
    assert LanguageModelConfig.from_preset("llama", positional="alibi", **SIZES).positional == "alibi"
    via_key = LanguageModelArchitecture.model_validate({"preset": "llama", "num_kv_heads": 2})
    assert via_key.norm == "rmsnorm" and via_key.num_kv_heads == 2
    assert set(PRESETS) == {"gpt2", "llama", "mistral", "qwen2"}
    model = LanguageModel(llama)
    assert isinstance(model.decoder.norm, RMSNorm) and model.lm_head.weight is not model.token_embedding.weight


def test_a_field_given_its_own_default_keeps_it_over_the_preset() -> None:
    """A preset fills only the fields not given: one given its class default (tie_weights=True, norm="layernorm",
    qkv_bias=None) keeps it, from the keyword, the `preset` key, from_preset and the task config alike."""
    tied = LanguageModelConfig(**SIZES, preset="llama", tie_weights=True, norm="layernorm")
    assert (tied.tie_weights, tied.norm, tied.positional, tied.bias) == (True, "layernorm", "rotary", False)
    assert LanguageModelConfig.from_preset("llama", tie_weights=True, **SIZES).tie_weights is True
    qwen = LanguageModelArchitecture.model_validate({"preset": "qwen2", "qkv_bias": None})
    assert qwen.qkv_bias is None and qwen.bias is False
    cfg = build_config("lm", overrides={"model.preset": "llama", "model.tie_weights": True})
    assert cfg.model.tie_weights is True and cfg.model.norm == "rmsnorm"  # type: ignore[attr-defined]
    again = type(cfg).model_validate(cfg.model_dump())  # a stored config validates to the same
    assert again.model_dump() == cfg.model_dump()
    model = LanguageModel(tied)
    assert model.lm_head.weight is model.token_embedding.weight


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(preset="falcon"), "'gpt2', 'llama', 'mistral' or 'qwen2'"),
        (dict(num_kv_heads=3), r"num_kv_heads \(3\) must divide num_heads \(4\)"),
        (dict(rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling needs positional='rotary'"),
        (dict(positional="rotary", rope_scaling={"type": "yarn", "factor": 2.0}), "'linear', 'dynamic' or 'llama3'"),
        (dict(sliding_window=0), "greater than 0"),
        (dict(norm="batchnorm"), "'layernorm', 'rmsnorm' or 'rmsnorm_offset'"),
    ],
)
def test_decoder_config_errors(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LanguageModelConfig(**{**SIZES, **kw})
    with pytest.raises(ValueError, match="unknown preset 'falcon'"):
        LanguageModelConfig.from_preset("falcon", **SIZES)


def test_rope_scaling_reference_length() -> None:
    assert RopeScaling(type="dynamic", factor=2.0).as_mapping(64)["original_max_position_embeddings"] == 64
    assert RopeScaling(type="llama3", factor=8.0).as_mapping(64)["original_max_position_embeddings"] == 8192
    with pytest.raises(ValueError, match="high_freq_factor > low_freq_factor"):
        RopeScaling(type="llama3", factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0)


def _hf_model(family: str) -> torch.nn.Module:
    common = dict(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": 5e5}))
    if family == "mistral":
        return MistralForCausalLM(MistralConfig(**common, sliding_window=3))
    return Qwen2ForCausalLM(Qwen2Config(**common))


def _copy_weights(hf: torch.nn.Module, ours: LanguageModel) -> None:
    sd = hf.state_dict()
    with torch.no_grad():
        ours.token_embedding.weight.copy_(sd["model.embed_tokens.weight"])
        ours.lm_head.weight.copy_(sd["lm_head.weight"])
        ours.decoder.norm.weight.copy_(sd["model.norm.weight"])  # type: ignore[union-attr]
        for i, layer in enumerate(ours.decoder.layers):
            p = f"model.layers.{i}."
            attn = layer.self_attn
            attn.in_proj.weight.copy_(torch.cat([sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]))
            if attn.in_proj.bias is not None:
                attn.in_proj.bias.copy_(torch.cat([sd[p + f"self_attn.{n}_proj.bias"] for n in "qkv"]))
            attn.out_proj.weight.copy_(sd[p + "self_attn.o_proj.weight"])
            layer.norm1.weight.copy_(sd[p + "input_layernorm.weight"])
            layer.norm3.weight.copy_(sd[p + "post_attention_layernorm.weight"])
            layer.ff.linear1.weight.copy_(torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]))
            layer.ff.linear2.weight.copy_(sd[p + "mlp.down_proj.weight"])


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_preset_matches_transformers_model(family: str) -> None:
    hf = _hf_model(family).eval()
    overrides = dict(num_kv_heads=2, layer_norm_eps=1e-6)
    if family == "llama":
        overrides["rope_theta"] = 5e5
    if family == "mistral":
        overrides["sliding_window"] = 3
    ours = LanguageModel(LanguageModelConfig.from_preset(family, **SIZES, **overrides)).eval()
    with torch.no_grad():
        if family == "qwen2":  # HF initialises q/k/v biases to zero: make them matter
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_()
    _copy_weights(hf, ours)
    ids = torch.randint(0, 50, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).logits
        got = ours(ids, mask.bool())
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(got[1, 3:], expected[1, 3:], atol=1e-5, rtol=0)
