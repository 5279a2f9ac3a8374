"""LoRA adapters on attnkit models (attnkit.models.lora, with peft).

(Named test_lora_model.py: tests/training/test_lora.py exists and the test folders are not packages.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from attnkit.models import (
    BertClassifier,
    BertClassifierConfig,
    LanguageModel,
    LanguageModelConfig,
    LoraConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    apply_lora,
    merge_lora,
)
from attnkit.models.lora import (
    base_fingerprint,
    base_state_dict,
    is_lora,
    load_base_state_dict,
    lora_state_keys,
    lora_target_modules,
    trainable_share,
)

VOCAB = 29


def tiny_lm(seed: int = 0, **kw) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=VOCAB, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0, max_len=16)
    return LanguageModel(LanguageModelConfig(**{**cfg, **kw})).eval()


def tiny_bert_classifier(seed: int = 0) -> BertClassifier:
    torch.manual_seed(seed)
    cfg = BertClassifierConfig(
        vocab_size=VOCAB, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, max_len=16, num_classes=3
    )
    return BertClassifier(cfg).eval()


def batch(seed: int = 0, n: int = 4, length: int = 12) -> torch.Tensor:
    return torch.randint(3, VOCAB, (n, length), generator=torch.Generator().manual_seed(seed))


def train_steps(model: torch.nn.Module, loss_fn, steps: int = 5) -> None:
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    for step in range(steps):
        opt.zero_grad()
        loss_fn(step).backward()
        opt.step()
    model.eval()


def lm_loss(model: LanguageModel):
    def loss(step: int) -> torch.Tensor:
        ids = batch(step)
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    return loss


# ---------------------------------------------------------------------------------------------- config
def test_config_defaults_and_errors() -> None:
    cfg = LoraConfig()
    assert (cfg.rank, cfg.alpha, cfg.targets, cfg.train_modules) == (8, 16.0, ["qkv", "out"], [])
    for bad in ({"rank": 0}, {"alpha": -1}, {"targets": []}, {"targets": ["q"]}, {"targets": ["out", "out"]}):
        with pytest.raises(ValidationError):
            LoraConfig(**bad)
    with pytest.raises(ValidationError, match="extra"):
        LoraConfig(ranks=4)


def test_targets_name_the_linear_layers_of_each_role() -> None:
    model = tiny_lm()
    per_layer = {
        "qkv": ["self_attn.in_proj"],
        "out": ["self_attn.out_proj"],
        "ffn": ["ff.linear1", "ff.linear2"],
    }
    for target, suffixes in per_layer.items():
        expected = [f"decoder.layers.{i}.{s}" for i in range(2) for s in suffixes]
        assert lora_target_modules(model, [target]) == expected
    assert "lm_head" not in lora_target_modules(model, ["qkv", "out", "ffn"])
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        lora_target_modules(model, ["attention"])


def test_cross_attention_is_refused_for_qkv() -> None:
    cfg = Seq2SeqConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2, num_layers=1)
    model = Seq2SeqTransformer(cfg)
    with pytest.raises(ValueError, match="cross-attention"):
        apply_lora(model, LoraConfig(targets=["qkv"]))
    apply_lora(model, LoraConfig(targets=["out", "ffn"]))  # layers every attention calls as modules are fine
    assert is_lora(model)


# ---------------------------------------------------------------------------------------------- wrapping
def test_wrapped_model_starts_as_the_base_and_trains_only_adapters() -> None:
    model = tiny_lm()
    ids = batch(9)
    with torch.no_grad():
        before_logits = model(ids)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fingerprint = base_fingerprint(model)

    apply_lora(model, LoraConfig(rank=4, targets=["qkv", "out", "ffn"]))
    assert is_lora(model)
    trainable = lora_state_keys(model)
    assert trainable and all(".lora_A." in k or ".lora_B." in k for k in trainable)
    assert len(trainable) == 2 * 4 * 2  # A and B, four linear layers per block, two blocks
    with torch.no_grad():
        assert torch.equal(model(ids), before_logits)  # B starts at zero
    assert base_fingerprint(model) == fingerprint  # the fingerprint reads the base under its plain names

    train_steps(model, lm_loss(model))
    after = base_state_dict(model)
    assert sorted(after) == sorted(before)
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), f"base tensor {name} changed"
    assert base_fingerprint(model) == fingerprint
    with torch.no_grad():
        assert not torch.allclose(model(ids), before_logits)  # the adapters learned something
    n_train, n_all = trainable_share(model)
    assert 0 < n_train < n_all


def test_merge_equals_base_plus_adapters_and_is_a_plain_model() -> None:
    model = tiny_lm()
    apply_lora(model, LoraConfig(rank=4, alpha=8, targets=["qkv", "out", "ffn"]))
    train_steps(model, lm_loss(model))
    ids = batch(11)
    with torch.no_grad():
        wrapped = model(ids)
        wrapped_generated = model.generate(ids[:1, :4], 6, temperature=0.0)
    merge_lora(model)
    assert not is_lora(model)
    assert sorted(model.state_dict()) == sorted(tiny_lm().state_dict())
    with torch.no_grad():
        merged = model(ids)
    assert (merged - wrapped).abs().max() <= 1e-5
    assert torch.equal(model.generate(ids[:1, :4], 6, temperature=0.0), wrapped_generated)
    plain = tiny_lm(seed=5)
    plain.load_state_dict(model.state_dict(), strict=True)  # loads without peft, names unchanged
    with torch.no_grad():
        assert torch.equal(plain(ids), merged)
    assert merge_lora(plain) is plain  # no adapters: unchanged


def test_merge_equals_explicit_base_plus_scaled_update() -> None:
    model = tiny_lm()
    apply_lora(model, LoraConfig(rank=2, alpha=6, targets=["out"]))
    train_steps(model, lm_loss(model))
    layer = model.decoder.layers[0].self_attn.out_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = layer.base_layer.weight + (6 / 2) * b @ a
    merge_lora(model)
    assert (model.decoder.layers[0].self_attn.out_proj.weight - expected).abs().max() <= 1e-6


def test_classifier_trains_adapters_and_its_new_head_only() -> None:
    model = tiny_bert_classifier()
    before = {k: v.clone() for k, v in model.bert.state_dict().items()}
    head_before = model.head.weight.clone()
    apply_lora(model, LoraConfig(rank=4, targets=["qkv", "ffn"], train_modules=["head"]))
    keys = lora_state_keys(model)
    assert {"head.weight", "head.bias"} <= set(keys)
    assert all(k.startswith("head.") or ".lora_" in k for k in keys)
    labels = torch.tensor([0, 1, 2, 1])
    train_steps(model, lambda step: F.cross_entropy(model(batch(step)), labels))
    assert not torch.equal(model.head.weight, head_before)
    after = base_state_dict(model.bert)
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), f"encoder tensor {name} changed"


def test_load_base_state_dict_into_a_wrapped_model() -> None:
    base = tiny_lm(seed=1)
    model = tiny_lm(seed=2)
    apply_lora(model, LoraConfig(targets=["qkv", "ffn"]))
    assert base_fingerprint(model) != base_fingerprint(base)
    load_base_state_dict(model, base.state_dict())
    assert base_fingerprint(model) == base_fingerprint(base)
    ids = batch(3)
    with torch.no_grad():
        assert torch.equal(model(ids), base(ids))
    state = dict(base.state_dict())
    state.pop("lm_head.weight")
    state["extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"missing \['lm_head.weight'\], unexpected \['extra.weight'\]"):
        load_base_state_dict(model, state)


def test_fingerprint_detects_a_changed_base() -> None:
    model = tiny_lm()
    fingerprint = base_fingerprint(model)
    with torch.no_grad():
        model.decoder.layers[1].ff.linear2.bias[3] += 1e-6
    assert base_fingerprint(model) != fingerprint


def test_wrong_uses_are_clear_errors() -> None:
    model = tiny_lm()
    with pytest.raises(ValueError, match=r"train_modules \['classifier'\] are not modules"):
        apply_lora(model, LoraConfig(train_modules=["classifier"]))
    apply_lora(model, {"rank": 2})
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        apply_lora(model, LoraConfig())


def test_llama_style_decoder_merges_exactly() -> None:
    """Grouped-query attention, rotary positions, RMSNorm and SwiGLU: the same targets and merge."""
    model = tiny_lm(preset="llama", num_kv_heads=2)
    assert model.config.positional == "rotary" and model.config.activation == "swiglu"
    apply_lora(model, LoraConfig(rank=4, targets=["qkv", "out", "ffn"]))
    train_steps(model, lm_loss(model))
    ids = batch(5)
    with torch.no_grad():
        wrapped = model(ids)
    merge_lora(model)
    with torch.no_grad():
        assert (model(ids) - wrapped).abs().max() <= 1e-5
