"""Loaded BERT encoders and GPT-2 decoders compute what Hugging Face's models compute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from interop_parity import constant_tensors, perturb
from safetensors.torch import load_file, save_file
from transformers import BertForMaskedLM, BertModel, BertTokenizer, GPT2LMHeadModel, GPT2Model, GPT2Tokenizer

from attnkit.interop import load_pretrained
from attnkit.interop.weights import load_weights
from attnkit.models import BertEncoder, LanguageModel
from conftest import SENTENCES, build_llama_family

TOL = 1e-5


def _padded_batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [4, 20] with padding (one row fully real), a mask (True = real) and two token types."""
    torch.manual_seed(0)
    lengths = torch.tensor([20, 13, 5, 1])
    mask = torch.arange(20)[None] < lengths[:, None]
    ids = torch.randint(5, vocab_size, (4, 20)).masked_fill(~mask, 0)
    token_types = (torch.arange(20)[None] >= lengths[:, None] // 2).long() * mask
    return ids, mask, token_types


def test_reference_models_have_no_constant_tensor(bert_dir: Path, gpt2_dir: Path, tmp_path: Path):
    """The folders the parity tests import hold no bias left at 0 and no norm weight left at 1 (the
    fixtures perturb every tensor), so that a dropped bias or a swapped norm weight changes the outputs."""
    folders = [bert_dir, gpt2_dir, build_llama_family("qwen2", tmp_path / "qwen2")]
    for folder in folders:
        tensors, _ = load_weights(folder)
        assert constant_tensors(tensors) == [], folder
    qwen2 = load_weights(folders[2])[0]
    assert {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.input_layernorm.weight"} <= set(qwen2)
    assert not torch.equal(qwen2["model.layers.0.input_layernorm.weight"], qwen2["model.norm.weight"])
    # Unperturbed, a fresh model has such tensors: the check above can fail.
    fresh = GPT2Model(GPT2LMHeadModel.from_pretrained(str(gpt2_dir)).config)
    assert "h.0.ln_1.weight" in constant_tensors(dict(fresh.state_dict()))
    names = perturb(fresh, seed=0)
    assert "h.0.attn.c_attn.bias" in names and constant_tensors(dict(fresh.state_dict())) == []


def test_bert_hidden_states_match_bert_model(bert_dir: Path):
    pretrained = load_pretrained(bert_dir)
    assert isinstance(pretrained.model, BertEncoder) and pretrained.name == "bert"
    assert pretrained.model.config.layer_norm_eps == 1e-12 and pretrained.model.config.activation == "gelu"
    ref = BertModel.from_pretrained(str(bert_dir)).eval()
    ids, mask, token_types = _padded_batch(ref.config.vocab_size)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask.long(), token_type_ids=token_types)
        hidden = pretrained.model(ids, mask, token_types)
    assert hidden.shape == expected.last_hidden_state.shape
    assert (hidden - expected.last_hidden_state).abs().max() <= TOL  # padded positions included
    assert (pretrained.model.pooled_output(hidden) - expected.pooler_output).abs().max() <= TOL
    assert not pretrained.model.training


def test_bert_sentence_embeddings_from_text(bert_dir: Path):
    """Text -> tokenizer -> encoder -> mean over real tokens, against the Hugging Face pipeline."""
    pretrained = load_pretrained(bert_dir)
    tok = BertTokenizer.from_pretrained(str(bert_dir))
    ref = BertModel.from_pretrained(str(bert_dir)).eval()
    batch = tok(SENTENCES, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        states = ref(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    expected = (states * weights).sum(1) / weights.sum(1)
    embeddings = pretrained.embed(SENTENCES)
    assert embeddings.shape == (len(SENTENCES), 32)
    assert (embeddings - expected).abs().max() <= TOL
    tokens, mask = pretrained.token_embeddings(SENTENCES[:2])
    assert (
        tokens.shape[:2] == mask.shape
        and (tokens[mask] - states[:2][batch["attention_mask"][:2].bool()]).abs().max() <= TOL
    )


def test_bert_from_task_model_and_pickle_weights(bert_dir: Path, tmp_path: Path):
    """A BertForMaskedLM folder (``bert.`` prefix, MLM head, no pooler) saved as ``pytorch_model.bin``."""
    ref = BertForMaskedLM.from_pretrained(str(bert_dir)).eval()
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    assert any(k.startswith("bert.") for k in state) and any(k.startswith("cls.") for k in state)
    torch.save(state, tmp_path / "pytorch_model.bin")
    ref.config.save_pretrained(str(tmp_path))
    shutil.copy(bert_dir / "vocab.txt", tmp_path / "vocab.txt")
    pretrained = load_pretrained(tmp_path)
    assert pretrained.model.pooler is None
    ids, mask, token_types = _padded_batch(ref.config.vocab_size)
    with torch.no_grad():
        expected = ref.bert(input_ids=ids, attention_mask=mask.long(), token_type_ids=token_types).last_hidden_state
        assert (pretrained.model(ids, mask, token_types) - expected).abs().max() <= TOL


def test_bert_legacy_layer_norm_names(bert_dir: Path, tmp_path: Path):
    """Old checkpoints name LayerNorm parameters gamma/beta."""
    state = load_file(bert_dir / "model.safetensors")
    legacy = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in state.items()
    }
    assert legacy != state
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    shutil.copy(bert_dir / "config.json", tmp_path / "config.json")
    a, b = load_pretrained(tmp_path).model.state_dict(), load_pretrained(bert_dir).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_gpt2_logits_match_gpt2_lm_head_model(gpt2_dir: Path):
    pretrained = load_pretrained(gpt2_dir)
    model = pretrained.model
    assert isinstance(model, LanguageModel) and pretrained.name == "lm"
    assert model.config.activation == "gelu_tanh" and model.config.norm_first
    assert model.lm_head.weight is model.token_embedding.weight  # tied
    ref = GPT2LMHeadModel.from_pretrained(str(gpt2_dir)).eval()
    ids = torch.randint(0, ref.config.vocab_size, (3, 40))
    with torch.no_grad():
        assert (model(ids) - ref(ids).logits).abs().max() <= TOL


def test_gpt2_greedy_generation_is_identical(gpt2_dir: Path):
    pretrained = load_pretrained(gpt2_dir)
    ref = GPT2LMHeadModel.from_pretrained(str(gpt2_dir)).eval()
    eot = pretrained.tokenizer.eos_id
    assert pretrained.model.config.eos_id == eot
    prompts = torch.randint(0, ref.config.vocab_size - 1, (2, 6))
    expected = ref.generate(
        prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=30, do_sample=False, pad_token_id=eot
    )
    ours = pretrained.model.generate(prompts, 30, temperature=0.0)  # KV cache
    assert ours.tolist() == expected.tolist()
    assert len(set(ours[0, 6:].tolist())) > 3  # not a single repeated token
    assert pretrained.model.generate(prompts, 30, temperature=0.0, use_cache=False).tolist() == expected.tolist()
    # From text, through the tokenizer:
    tok = GPT2Tokenizer.from_pretrained(str(gpt2_dir))
    prompt = "the film was"
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    out = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False, pad_token_id=eot)
    assert pretrained.generate(prompt, 12) == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_gpt2_base_model_and_untied_head(gpt2_dir: Path, tmp_path: Path):
    ref = GPT2LMHeadModel.from_pretrained(str(gpt2_dir)).eval()
    # GPT2Model: names without the "transformer." prefix, no head; the head is the tied embedding.
    GPT2Model.from_pretrained(str(gpt2_dir)).save_pretrained(str(tmp_path / "base"))
    base = load_pretrained(tmp_path / "base").model
    ids = torch.randint(0, ref.config.vocab_size, (2, 16))
    with torch.no_grad():
        assert (base(ids) - ref(ids).logits).abs().max() <= TOL
    # An untied output layer comes from lm_head.weight.
    ref.config.tie_word_embeddings = False
    untied = GPT2LMHeadModel(ref.config)
    untied.load_state_dict(ref.state_dict(), strict=False)
    with torch.no_grad():
        untied.lm_head.weight.normal_()
    untied.eval().save_pretrained(str(tmp_path / "untied"))
    model = load_pretrained(tmp_path / "untied").model
    assert not model.config.tie_weights and model.lm_head.weight is not model.token_embedding.weight
    with torch.no_grad():
        assert (model(ids) - untied(ids).logits).abs().max() <= TOL


def test_sharded_safetensors(bert_dir: Path, tmp_path: Path):
    """Large models come in shards listed by model.safetensors.index.json."""
    tensors = load_file(bert_dir / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({k: tensors[k] for k in part}, tmp_path / file)
    weight_map = {k: file for file, part in shards.items() for k in part}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for name in ("config.json", "vocab.txt"):
        shutil.copy(bert_dir / name, tmp_path / name)
    a, b = load_pretrained(tmp_path).model.state_dict(), load_pretrained(bert_dir).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)
