"""Loaded Llama, Mistral and Qwen2 decoders compute what Hugging Face's models compute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop import import_model, load_pretrained
from attnkit.models import LanguageModel
from conftest import LLAMA_FAMILY, build_llama_family

TOL = 1e-5


def _reference(folder: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()


def _greedy(ref: torch.nn.Module, ids: torch.Tensor, n: int, model: LanguageModel) -> torch.Tensor:
    """transformers' greedy ``generate`` with the padding and end ids of attnkit's ``model``."""
    return ref.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n,
        do_sample=False,
        pad_token_id=model.config.pad_id,
        eos_token_id=model.config.eos_id,
    )


def _edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_logits_match_transformers(llama_family_dir: Path):
    pretrained = load_pretrained(llama_family_dir)
    model = pretrained.model
    assert isinstance(model, LanguageModel) and pretrained.name == "lm" and not model.training
    ref = _reference(llama_family_dir)
    c = model.config
    assert (c.norm, c.activation, c.positional, c.bias) == ("rmsnorm", "swiglu", "rotary", False)
    assert c.num_kv_heads == ref.config.num_key_value_heads < c.num_heads
    assert c.tie_weights == ref.config.tie_word_embeddings
    assert (model.lm_head.weight is model.token_embedding.weight) == c.tie_weights
    torch.manual_seed(0)
    ids = torch.randint(0, c.vocab_size, (3, 40))  # 40 > Mistral's window of 8, > llama3's original 16
    with torch.no_grad():
        expected = ref(ids).logits
        assert (model(ids) - expected).abs().max() <= TOL
        # right padding: the real positions are unchanged
        mask = torch.arange(40)[None] < torch.tensor([[40], [25], [3]])
        assert ((model(ids, mask) - expected)[mask]).abs().max() <= TOL


def test_greedy_generation_is_identical(llama_family_dir: Path):
    pretrained = load_pretrained(llama_family_dir)
    model = pretrained.model
    ref = _reference(llama_family_dir)
    torch.manual_seed(1)
    prompts = torch.randint(3, model.config.vocab_size, (2, 6))
    expected = _greedy(ref, prompts, 30, model)
    ours = model.generate(prompts, 30, temperature=0.0)  # KV cache
    assert ours.tolist() == expected.tolist()
    assert len(set(ours[0, 6:].tolist())) > 3  # not a single repeated token
    assert model.generate(prompts, 30, temperature=0.0, use_cache=False).tolist() == expected.tolist()
    # From text, through tokenizer.json (Llama and Mistral put <s> first, Qwen2 nothing):
    tok = AutoTokenizer.from_pretrained(str(llama_family_dir))
    prompt = "the film was"
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == pretrained.tokenizer.encode(prompt)
    out = _greedy(ref, ids, 12, model)
    assert pretrained.generate(prompt, 12) == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_batched_mixed_length_prompts_match_left_padded_transformers(llama_family_dir: Path):
    """A list of prompts of different lengths (attnkit left-pads them) gives transformers' tokens for
    the same left-padded batch (per-row positions; Mistral's window over the real tokens)."""
    model = load_pretrained(llama_family_dir).model
    c = model.config
    torch.manual_seed(2)
    prompts = [torch.randint(3, c.vocab_size, (n,)).tolist() for n in (3, 12, 7)]
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), c.pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    expected = _reference(llama_family_dir).generate(
        ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=c.pad_id, eos_token_id=c.eos_id
    )
    assert model.generate(prompts, 20, temperature=0.0).tolist() == expected.tolist()


def test_family_specific_settings(tmp_path: Path):
    llama = load_pretrained(build_llama_family("llama", tmp_path / "llama")).model.config
    scaling = llama.rope_scaling
    assert llama.rope_theta == 500000.0 and scaling is not None and scaling.type == "llama3"
    assert (scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor) == (4.0, 1.0, 4.0)
    assert scaling.original_max_position_embeddings == 16
    linear = load_pretrained(build_llama_family("llama_linear", tmp_path / "linear")).model.config
    assert linear.rope_scaling is not None and (linear.rope_scaling.type, linear.rope_scaling.factor) == ("linear", 2.0)
    assert linear.head_dim == 16 and linear.num_kv_heads == 1 and linear.tie_weights
    mistral = load_pretrained(build_llama_family("mistral", tmp_path / "mistral")).model.config
    assert mistral.sliding_window == 8 and not mistral.tie_weights
    qwen2 = load_pretrained(build_llama_family("qwen2", tmp_path / "qwen2"))
    assert qwen2.model.config.qkv_bias and not qwen2.model.config.bias and qwen2.model.config.sliding_window is None
    assert qwen2.model.config.eos_id == qwen2.model.config.bos_id == qwen2.tokenizer.eos_id  # Qwen2 has no BOS


def test_older_config_names_read_the_same(llama_dir: Path, tmp_path: Path):
    """transformers 4 wrote rope_theta + rope_scaling (with "type" or "rope_type"), not rope_parameters."""
    old = shutil.copytree(llama_dir, tmp_path / "old")
    config = json.loads((old / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = {"type": rope.pop("rope_type"), **rope}
    (old / "config.json").write_text(json.dumps(config))
    assert load_pretrained(old).model.config == load_pretrained(llama_dir).model.config


def test_dynamic_rope_scaling_starts_at_the_context(llama_dir: Path, tmp_path: Path):
    """transformers' dynamic NTK scaling ignores original_max_position_embeddings: it starts past
    max_position_embeddings (attnkit's max_len), as attnkit's import reads it."""
    folder = shutil.copytree(llama_dir, tmp_path / "dynamic")
    rope = {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0, "original_max_position_embeddings": 16}
    _edit_config(folder, rope_parameters=rope)
    model = load_pretrained(folder).model
    scaling = model.config.rope_scaling
    assert scaling is not None and (scaling.type, scaling.factor, scaling.original_max_position_embeddings) == (
        "dynamic",
        2.0,
        64,
    )
    ids = torch.randint(0, model.config.vocab_size, (2, 64))
    with torch.no_grad():
        assert (model(ids) - _reference(folder)(ids).logits).abs().max() <= TOL


def test_sharded_checkpoint_and_import(tmp_path: Path):
    """save_pretrained(max_shard_size=...) writes shards listed by model.safetensors.index.json."""
    sharded = build_llama_family("qwen2", tmp_path / "sharded", max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    pretrained = load_pretrained(sharded)
    ref = _reference(sharded)
    ids = torch.randint(0, pretrained.model.config.vocab_size, (2, 20))
    with torch.no_grad():
        assert (pretrained.model(ids) - ref(ids).logits).abs().max() <= TOL
    import_model(sharded, tmp_path / "imported")
    imported = load_pretrained(tmp_path / "imported")
    assert imported.model.config == pretrained.model.config and imported.tokenizer == pretrained.tokenizer
    assert imported.model.lm_head.weight is imported.model.token_embedding.weight  # tied, stored once
    for name, tensor in pretrained.model.state_dict().items():
        assert torch.equal(imported.model.state_dict()[name], tensor), name


def test_base_model_without_prefix(llama_dir: Path, tmp_path: Path):
    """LlamaModel (no "model." prefix, no head) saved alone: the head is then missing (untied)."""
    AutoModel.from_pretrained(str(llama_dir)).save_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"missing \(1\): lm_head.weight"):
        load_pretrained(tmp_path)
    _edit_config(tmp_path, tie_word_embeddings=True)
    model = load_pretrained(tmp_path).model
    assert torch.equal(model.token_embedding.weight, load_pretrained(llama_dir).model.token_embedding.weight)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, r"rope scaling type 'yarn'"),
        ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, r"rope scaling 'linear' needs a 'factor'"),
        ({"mlp_bias": True}, r"this llama variant is not supported: mlp_bias=true"),
        ({"attention_bias": True}, r"attention_bias=true"),
        ({"hidden_act": "gelu"}, r"hidden_act='gelu' \(only 'silu'"),
        ({"partial_rotary_factor": 0.5}, r"partial_rotary_factor=0.5"),
        ({"num_hidden_layers": None}, r"invalid llama config"),
    ],
)
def test_unsupported_configs_are_refused(llama_dir: Path, tmp_path: Path, changes: dict, message: str):
    folder = shutil.copytree(llama_dir, tmp_path / "bad")
    _edit_config(folder, **changes)
    with pytest.raises(ConfigError, match=message):
        load_pretrained(folder)


def test_qwen2_window_on_some_layers_is_refused(tmp_path: Path):
    folder = build_llama_family("qwen2", tmp_path / "qwen2")
    _edit_config(folder, use_sliding_window=True, sliding_window=4, layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(ConfigError, match=r"sliding window on some layers only"):
        load_pretrained(folder)
    _edit_config(folder, layer_types=["sliding_attention", "sliding_attention"])
    assert load_pretrained(folder).model.config.sliding_window == 4


def test_weights_that_do_not_match_the_config(llama_dir: Path, tmp_path: Path):
    heads = shutil.copytree(llama_dir, tmp_path / "heads")
    _edit_config(heads, num_key_value_heads=4)
    with pytest.raises(CheckpointError, match=r"wrong shape \(4\): layers.0.self_attn.k_proj.weight: shape \(16, 32\)"):
        load_pretrained(heads)

    missing = shutil.copytree(llama_dir, tmp_path / "missing")
    tensors = load_file(missing / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(32)
    save_file(tensors, missing / "model.safetensors")
    with pytest.raises(
        CheckpointError,
        match=r"(?s)missing \(1\): layers.1.mlp.up_proj.weight.*unexpected \(1\): layers.0.self_attn.q_proj.bias",
    ):
        load_pretrained(missing)


def test_variants_cover_the_brief():
    """The fixtures hold what the tests above rely on (a guard against editing them away)."""
    assert {v["model_type"] for v in LLAMA_FAMILY.values()} == {"llama", "mistral", "qwen2"}
    assert {v.get("tie_word_embeddings", False) for v in LLAMA_FAMILY.values()} == {True, False}
