"""Gemma 3 beyond the shared family tests (``test_family_models.py``): a tied head, each of its settings shown to
matter (a wrong window, pattern, rotary base, scale or norm gives other logits), transformers 4's config keys,
what it refuses to read or write, and serving rows of several lengths in one batch."""

from __future__ import annotations

import json
import queue
from pathlib import Path

import pytest
import torch
from interop_parity import perturb
from transformers import AutoConfig, AutoModelForCausalLM

from attnkit.errors import ConfigError
from attnkit.interop import export_hf, load_pretrained
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.models.generation import SamplingParams
from attnkit.serve import Engine
from attnkit.serve.events import Failed, Finished
from conftest import save_llama_tokenizer

TOL = 1e-5
ROPE = {
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
}


def _gemma3(folder: Path, **options: object) -> Path:
    """A random, perturbed, tied Gemma3ForCausalLM of 3 layers (sliding, global, sliding; a window of 8)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = save_llama_tokenizer("llama", folder)
    settings: dict[str, object] = dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.05, sliding_window=8,
        sliding_window_pattern=2, query_pre_attn_scalar=24, rope_parameters=ROPE, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gemma3_text", **(settings | options)))
    perturb(model, seed=5)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gemma3(tmp_path_factory.mktemp("gemma3"))


def test_tied_logits_match_and_every_setting_counts(gemma_dir: Path) -> None:
    model = load_pretrained(gemma_dir).model
    c = model.config
    assert (c.tie_weights, c.sliding_window, c.sliding_window_pattern, c.rope_local_theta) == (True, 8, 2, 100.0)
    assert model.lm_head.weight is model.token_embedding.weight
    ref = AutoModelForCausalLM.from_pretrained(str(gemma_dir), attn_implementation="eager").eval()
    torch.manual_seed(0)
    ids = torch.randint(0, c.vocab_size, (2, 40))  # 40 tokens: the window of 8 cuts most of each row
    mask = torch.arange(40)[None] >= torch.tensor([[0], [13]])  # the second row left-padded
    with torch.no_grad():
        expected = ref(ids).logits
        assert (model(ids) - expected).abs().max() <= TOL
        padded = ref(ids, attention_mask=mask.long()).logits
        assert ((model(ids, mask) - padded)[mask]).abs().max() <= TOL
        wrong = {
            "window": {"sliding_window": 9},
            "no pattern": {"sliding_window_pattern": None, "rope_local_theta": None},
            "one rotary base": {"rope_local_theta": None},
            "the head_dim scale": {"attn_scale": None},
            "no embedding scale": {"embed_scale": False},
            "RMSNorm": {"norm": "rmsnorm"},
            "no sandwich norms": {"sandwich_norm": False},
        }
        for name, change in wrong.items():
            other = LanguageModel(LanguageModelConfig.model_validate(c.model_dump() | change))
            missing = other.load_state_dict(model.state_dict(), strict=False)
            assert not missing.missing_keys
            assert (other(ids) - expected).abs().max() > 1e-3, name


def test_transformers_4_config_keys(gemma_dir: Path, tmp_path: Path) -> None:
    """Gemma 3's configs of transformers 4 (on the Hub): rope_theta, rope_local_base_freq, rope_scaling and
    sliding_window_pattern instead of rope_parameters and layer_types."""
    config = json.loads((gemma_dir / "config.json").read_text())
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((gemma_dir / name).read_bytes())
    old = {k: v for k, v in config.items() if k not in ("rope_parameters", "layer_types")}
    old |= {
        "rope_theta": 50000.0,
        "rope_local_base_freq": 100.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    }
    (tmp_path / "config.json").write_text(json.dumps(old | {"sliding_window_pattern": 2}))
    assert load_pretrained(tmp_path).model.config == load_pretrained(gemma_dir).model.config
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in old.items() if k != "sliding_window_pattern"}))
    every_layer_slides = load_pretrained(tmp_path).model  # a pattern of 6 (the default) over 3 layers
    c = every_layer_slides.config
    assert (c.sliding_window, c.sliding_window_pattern, c.rope_theta, c.rope_scaling) == (8, None, 100.0, None)
    ids = torch.randint(0, c.vocab_size, (1, 30))
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()(ids).logits
        assert (every_layer_slides(ids) - expected).abs().max() <= TOL


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"final_logit_softcapping": 30.0}, r"final_logit_softcapping=30.0 \(logit soft-capping\)"),
        ({"attn_logit_softcapping": 50.0}, r"attn_logit_softcapping=50.0"),
        ({"use_bidirectional_attention": True}, r"use_bidirectional_attention=true \(only causal attention\)"),
        ({"hidden_activation": "gelu"}, r"hidden_activation='gelu' \(only the tanh GELU"),
        (
            {"layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
            r"layer_types .* not supported",
        ),
        ({"layer_types": ["sliding_attention"]}, r"layer_types must be 3 of 'sliding_attention' / 'full_attention'"),
        ({"sliding_window": None}, r"sliding_window is null but layer_types has 'sliding_attention' layers"),
        (
            {
                "rope_parameters": ROPE
                | {"sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1.0}}
            },
            r"scaled rotary positions on the sliding layers .* are not supported",
        ),
    ],
)
def test_refused_configs(gemma_dir: Path, tmp_path: Path, change: dict[str, object], message: str) -> None:
    config = json.loads((gemma_dir / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes((gemma_dir / "model.safetensors").read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(config | change))
    with pytest.raises(ConfigError, match=message):
        load_pretrained(tmp_path)


def test_export_refuses_what_gemma3_cannot_express(gemma_dir: Path, tmp_path: Path) -> None:
    model = load_pretrained(gemma_dir).model
    c = model.config
    llama = LanguageModel(LanguageModelConfig.from_preset("llama", vocab_size=40, d_model=16, num_heads=2))
    with pytest.raises(ConfigError, match=r"as a Gemma 3 Hugging Face checkpoint: .*norm='rmsnorm' \(Gemma 3 uses"):
        export_hf(llama, tmp_path / "llama", model_type="gemma3_text")
    for change, message in [
        ({"attn_scale": 0.3}, r"attn_scale=0.3 \(Gemma 3 writes it as an integer query_pre_attn_scalar"),
        ({"rope_local_theta": None, "sliding_window_pattern": None}, r"rope_scaling on sliding layers"),
        ({"embed_scale": False}, r"embed_scale=false"),
    ]:
        other = LanguageModel(LanguageModelConfig.model_validate(c.model_dump() | change))
        with pytest.raises(ConfigError, match=message):
            export_hf(other, tmp_path / "out")
    # Every layer global, no scaling: written with no window, and transformers computes the same logits.
    plain = LanguageModelConfig.model_validate(
        c.model_dump() | {"sliding_window": None, "sliding_window_pattern": None, "rope_local_theta": None}
    )
    full = LanguageModel(plain).eval()
    full.load_state_dict(model.state_dict())
    assert export_hf(full, tmp_path / "full") == "gemma3_text"
    written = json.loads((tmp_path / "full" / "config.json").read_text())
    assert written["layer_types"] == ["full_attention"] * 3 and written["query_pre_attn_scalar"] == 24
    ids = torch.randint(0, c.vocab_size, (1, 30))
    reference = AutoModelForCausalLM.from_pretrained(str(tmp_path / "full")).eval()
    with torch.no_grad():
        assert (reference(ids).logits - full(ids)).abs().max() <= TOL


def test_served_in_one_batch_as_alone(gemma_dir: Path) -> None:
    """``attnkit serve``'s engine joins rows of different lengths into one batch (left padding, merged caches):
    with interleaved windows, each row still gets the tokens it gets alone."""
    pretrained = load_pretrained(gemma_dir)
    model = pretrained.model
    torch.manual_seed(4)
    prompts = [torch.randint(3, model.config.vocab_size, (n,)).tolist() for n in (3, 12, 7, 20)]
    alone = [model.generate([p], 25, temperature=0.0, stop_at_eos=False)[0, len(p) :].tolist() for p in prompts]
    events: queue.Queue[tuple[int, object]] = queue.Queue()
    got: dict[int, list[int]] = {}
    with Engine(model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as engine:
        for i, prompt in enumerate(prompts):
            engine.submit(prompt, SamplingParams(max_tokens=25, temperature=0.0), lambda e, i=i: events.put((i, e)))
        while len(got) < len(prompts):
            i, event = events.get(timeout=60)
            assert not isinstance(event, Failed), event
            if isinstance(event, Finished):
                got[i] = list(event.ids)
    assert [got[i] for i in range(len(prompts))] == alone
    assert len({token for row in alone for token in row}) > 8  # not one repeated token
