"""attnkit language models written as Hugging Face folders load in transformers with the same logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from interop_parity import perturb
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

import attnkit
from attnkit.cli import main
from attnkit.data.lm.blocks import tokenizer_of
from attnkit.errors import ConfigError
from attnkit.interop import export_hf, hf_tokenizer, import_model, load_pretrained
from attnkit.models import BertConfig, BertEncoder, LanguageModel, LanguageModelConfig
from attnkit.tasks import load_run
from attnkit.text.tokenizers import build_tokenizer
from conftest import corpus

TOL = 1e-5


def _transformers_logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        return model(ids).logits


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(ids)


def test_imported_models_export_back_to_their_family(llama_family_dir: Path, tmp_path: Path):
    """Hugging Face -> attnkit (import) -> Hugging Face (export --format hf): same family, same logits."""
    import_model(llama_family_dir, tmp_path / "attnkit")
    imported = load_pretrained(tmp_path / "attnkit")
    model_type = export_hf(imported.model, tmp_path / "hf", imported.tokenizer)
    original = json.loads((llama_family_dir / "config.json").read_text())
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert model_type == written["model_type"] == original["model_type"]
    assert written["tie_word_embeddings"] == original["tie_word_embeddings"]
    ids = torch.randint(0, imported.model.config.vocab_size, (2, 40))
    expected = _transformers_logits(llama_family_dir, ids)
    assert (_transformers_logits(tmp_path / "hf", ids) - expected).abs().max() <= TOL
    again = load_pretrained(tmp_path / "hf")
    assert again.model.config == imported.model.config
    for name, tensor in imported.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[name], tensor), name
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    text = "Café, the film was good!"
    assert tok(text)["input_ids"] == imported.tokenizer.encode(text) == again.tokenizer.encode(text)


def test_cli_exports_an_imported_llama(llama_dir: Path, tmp_path: Path):
    import_model(llama_dir, tmp_path / "attnkit")
    proc = CliRunner().invoke(
        main, ["export", str(tmp_path / "attnkit"), "--out", str(tmp_path / "hf"), "--format", "hf"]
    )
    assert proc.exit_code == 0 and "(llama)" in proc.output, proc.output
    assert {p.name for p in (tmp_path / "hf").iterdir()} == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    ids = torch.randint(0, 300, (1, 30))
    assert (_transformers_logits(tmp_path / "hf", ids) - _transformers_logits(llama_dir, ids)).abs().max() <= TOL


@pytest.mark.parametrize(
    ("preset", "overrides", "model_type"),
    [
        ("llama", {"num_kv_heads": 2, "rope_theta": 5e5}, "llama"),
        ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}, "tie_weights": True}, "llama"),
        (
            "llama",
            {"rope_scaling": {"type": "llama3", "factor": 4.0, "original_max_position_embeddings": 8}},
            "llama",
        ),
        ("llama", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "llama"),
        ("mistral", {"sliding_window": 5, "num_kv_heads": 1}, "mistral"),
        ("qwen2", {"num_kv_heads": 2, "tie_weights": True}, "qwen2"),
        ("gpt2", {}, "gpt2"),
        ("gpt2", {"activation": "gelu", "tie_weights": False}, "gpt2"),
        (None, {"activation": "relu"}, "gpt2"),  # attnkit's default lm architecture (learned, LayerNorm)
    ],
)
def test_attnkit_models_load_in_transformers(preset: str | None, overrides: dict, model_type: str, tmp_path: Path):
    torch.manual_seed(0)
    config = LanguageModelConfig(
        vocab_size=97, preset=preset, d_model=32, num_heads=4, num_layers=2, dim_feedforward=48, max_len=32, **overrides
    )
    model = LanguageModel(config).eval()
    perturb(model, seed=0)  # non-trivial norms and biases, so that a misplaced one shows
    assert export_hf(model, tmp_path) == model_type
    ids = torch.randint(0, 97, (3, 32))
    assert (_transformers_logits(tmp_path, ids) - _logits(model, ids)).abs().max() <= TOL
    again = load_pretrained(tmp_path).model
    assert (_logits(again, ids) - _logits(model, ids)).abs().max() <= TOL


def test_what_cannot_be_expressed_is_named(tmp_path: Path):
    def lm(**fields: object) -> LanguageModel:
        return LanguageModel(
            LanguageModelConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=1, dim_feedforward=16, **fields)
        )

    with pytest.raises(ConfigError, match=r"as a Llama-family .*norm='layernorm' \(they use rmsnorm\)"):
        export_hf(lm(positional="rotary"), tmp_path)
    with pytest.raises(ConfigError, match=r"bias=true \(they have no biases"):
        export_hf(lm(norm="rmsnorm", activation="swiglu", positional="rotary", bias=True), tmp_path)
    with pytest.raises(ConfigError, match=r"qkv_bias together with sliding_window"):
        export_hf(lm(preset="qwen2", sliding_window=4), tmp_path)
    with pytest.raises(ConfigError, match=r"as a GPT-2 .*positional='sinusoidal'.*bias=false"):
        export_hf(lm(positional="sinusoidal", bias=False), tmp_path)
    with pytest.raises(ConfigError, match=r"as a GPT-2 .*norm_first=false"):
        export_hf(lm(norm_first=False), tmp_path)
    dynamic = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    with pytest.raises(ConfigError, match=r"dynamic rope_scaling from original_max_position_embeddings=8"):
        export_hf(lm(preset="llama", max_len=32, rope_scaling=dynamic), tmp_path)
    with pytest.raises(ConfigError, match=r"positional='alibi'"):
        export_hf(lm(positional="alibi"), tmp_path)
    with pytest.raises(ConfigError, match=r"only language models .* this is a BertEncoder"):
        export_hf(BertEncoder(BertConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=1)), tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_generation_tokenizers_as_tokenizer_json(kind: str, tmp_path: Path):
    """attnkit's lm tokenizers written as tokenizer.json encode (with <bos> first) and decode alike."""
    texts = corpus()
    tok = build_tokenizer(kind, texts, vocab_size=400 if kind == "bpe" else None)
    hf_tokenizer(tok).save(tmp_path)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    # Texts whose words the vocabularies know (an unknown word encodes differently: see hf_tokenizer).
    for text in [texts[0], texts[5] + "\n\n" + texts[7], "  " + texts[3] + " ", "The film was good, not bad!"]:
        ids = tok.encode(text, add_bos=True)
        assert fast(text)["input_ids"] == ids, text
        assert fast.decode(ids, skip_special_tokens=True) == tok.decode(ids)


def test_cli_exports_an_lm_run(tmp_path: Path):
    """A trained lm run (char tokenizer, attnkit's default GPT-2-like architecture) -> gpt2."""
    sizes = {"model.d_model": 32, "model.num_layers": 1, "model.num_heads": 2, "model.dim_feedforward": 64}
    result = attnkit.train(
        "lm",
        output_dir=str(tmp_path),
        name="tiny",
        data={"builtin_documents": 40},
        **sizes,
        **{"model.max_len": 32, "trainer.max_epochs": 1, "trainer.threads": 1, "trainer.progress_bar": False},
    )
    cli = CliRunner()
    printed = cli.invoke(main, ["export", str(result.run_dir), "--out", str(tmp_path / "hf"), "--format", "hf"])
    assert printed.exit_code == 0 and "(gpt2)" in printed.output, printed.output
    loaded = load_run(result.run_dir)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    text = "The owl flew over the hill."
    ids = tok(text, return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == tokenizer_of(loaded.hparams["artifacts"]).encode(text, add_bos=True)
    assert (_transformers_logits(tmp_path / "hf", ids) - _logits(loaded.module.model, ids)).abs().max() <= TOL
    failed = cli.invoke(main, ["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"), "--format", "hf"])
    assert failed.exit_code != 0 and "nowhere" in failed.output


def test_parity_script_quick_mode():
    """benchmarks/hf_parity.py (the README's figures) works end to end on tiny sizes."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_parity.py"
    spec = importlib.util.spec_from_file_location("hf_parity", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.check("qwen2", {}, quick=True, tol=TOL)
