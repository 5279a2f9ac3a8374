"""The families added through the checkpoint-family registry (Qwen3: per-head q/k norms; Phi-3: fused
``qkv_proj`` / ``gate_up_proj``; Gemma 3: its norms, scales, GeGLU and interleaved windows) compute what
transformers' models compute, generate the same tokens, and export to folders transformers loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from interop_parity import perturb
from transformers import AutoConfig, AutoModelForCausalLM

from attnkit.errors import ConfigError
from attnkit.interop import SUPPORTED_MODEL_TYPES, export_hf, load_pretrained
from attnkit.models import LanguageModel
from conftest import save_llama_tokenizer

TOL = 1e-5
# model_type: (the tokenizer's specials, as conftest's families have them; the config's own settings)
NEW_FAMILIES: dict[str, tuple[str, dict[str, object]]] = {
    # head_dim 16 != hidden_size / heads (as real Qwen3s), tied head, q/k norms
    "qwen3": ("qwen2", {"head_dim": 16, "tie_word_embeddings": True}),
    # fused projections, a window of 8 on every layer (the 40-token inputs cross it), untied head
    "phi3": ("llama", {"sliding_window": 8}),
    # Gemma 3: layer 0 slides (a window of 8, rotary base 100), layer 1 is global (base 50000, linear scaling);
    # a query scalar that is not head_dim, a head_dim of its own; untied (a tied random one repeats one token:
    # tied in test_family_gemma3.py)
    "gemma3_text": (
        "llama",
        {
            "tie_word_embeddings": False,
            "head_dim": 16,
            "sliding_window": 8,
            "sliding_window_pattern": 2,
            "query_pre_attn_scalar": 24,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
        },
    ),
}


def _build(model_type: str, folder: Path) -> Path:
    specials, options = NEW_FAMILIES[model_type]
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = save_llama_tokenizer(specials, folder)
    ids = {t["content"]: t["id"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}
    config = AutoConfig.for_model(
        model_type,
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.2,
        bos_token_id=ids.get("<s>"),
        eos_token_id=ids.get("</s>", ids.get("<|endoftext|>")),
        pad_token_id=ids.get("<|endoftext|>"),
        **options,
    )
    torch.manual_seed(sum(map(ord, model_type)))
    model = AutoModelForCausalLM.from_config(config)
    perturb(model, seed=sum(map(ord, model_type)))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=sorted(NEW_FAMILIES))
def family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(request.param, tmp_path_factory.mktemp(request.param))


def _reference(folder: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()


def test_logits_match_transformers(family_dir: Path):
    model = load_pretrained(family_dir).model
    assert isinstance(model, LanguageModel)
    ref = _reference(family_dir)
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 40))
    with torch.no_grad():
        expected = ref(ids).logits
        assert (model(ids) - expected).abs().max() <= TOL
        mask = torch.arange(40)[None] < torch.tensor([[40], [25], [3]])
        assert ((model(ids, mask) - expected)[mask]).abs().max() <= TOL


def test_greedy_and_batched_generation_match_transformers(family_dir: Path):
    model = load_pretrained(family_dir).model
    c = model.config
    ref = _reference(family_dir)
    torch.manual_seed(2)
    prompts = [torch.randint(3, c.vocab_size, (n,)).tolist() for n in (3, 12, 7)]
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), c.pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    options = dict(max_new_tokens=20, do_sample=False, pad_token_id=c.pad_id, eos_token_id=c.eos_id)
    expected = ref.generate(ids, attention_mask=mask, **options)
    assert model.generate(prompts, 20, temperature=0.0).tolist() == expected.tolist()
    single = ref.generate(ids[1:2], attention_mask=mask[1:2], **options)  # the longest prompt, unpadded
    assert model.generate(ids[1:2], 20, temperature=0.0).tolist() == single.tolist()
    assert len(set(single[0, width:].tolist())) > 3  # not one repeated token


@pytest.mark.parametrize("as_family", [False, True])
def test_export_round_trip(family_dir: Path, tmp_path: Path, as_family: bool):
    """Exported (as the config's family, or as the source family by name), transformers loads the
    folder and computes the same logits; attnkit loads it back."""
    pretrained = load_pretrained(family_dir)
    source_type = pretrained.info["model_type"]
    written = export_hf(pretrained.model, tmp_path, pretrained.tokenizer, model_type=source_type if as_family else None)
    # Qwen3's q/k norms and Gemma 3's norms make each its own family; a Phi-3 config is a Llama-family one (with
    # a window: mistral).
    assert written == (source_type if as_family or source_type in ("qwen3", "gemma3_text") else "mistral")
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == written
    torch.manual_seed(3)
    ids = torch.randint(0, pretrained.model.config.vocab_size, (2, 40))
    with torch.no_grad():
        ours = pretrained.model(ids)
        assert (_reference(tmp_path)(ids).logits - ours).abs().max() <= TOL
        assert (load_pretrained(tmp_path).model(ids) - ours).abs().max() <= TOL


def test_registry_lists_the_families_and_refuses_what_they_cannot(tmp_path: Path):
    assert {"qwen3", "phi3"} <= set(SUPPORTED_MODEL_TYPES)
    assert "Qwen3ForCausalLM" in SUPPORTED_MODEL_TYPES["qwen3"]
    folder = _build("phi3", tmp_path / "phi3")
    config = json.loads((folder / "config.json").read_text())
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
    (folder / "config.json").write_text(json.dumps(config | {"rope_parameters": longrope}))
    with pytest.raises(ConfigError, match=r"rope scaling type 'longrope' is not supported"):
        load_pretrained(folder)
    partial = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}
    (folder / "config.json").write_text(json.dumps(config | {"rope_parameters": partial}))
    with pytest.raises(ConfigError, match=r"partial_rotary_factor=0.75 is not supported"):
        load_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(config | {"model_type": "gemma3"}))
    with pytest.raises(
        ConfigError, match=r"model_type 'gemma3' .*not supported.*phi3: Phi-3 decoders.*qwen3: Qwen3 decoders"
    ):
        load_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(config))
    model = load_pretrained(folder).model
    with pytest.raises(
        ConfigError, match=r"cannot write model_type 'bert': the families that export are gemma3_text, gpt2, "
    ):
        export_hf(model, tmp_path / "out", model_type="bert")
    with pytest.raises(ConfigError, match=r"as a Qwen3 Hugging Face checkpoint: .*qk_norm=False \(this family has"):
        export_hf(model, tmp_path / "out", model_type="qwen3")
