"""attnkit model folders (safetensors + attnkit.json): written by import/export, loaded back bit-exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop import import_model, load_model, load_pretrained, save_model
from attnkit.models import BertEncoder, LanguageModel, LanguageModelConfig


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].dtype == sb[name].dtype and torch.equal(sa[name], sb[name]), name


def test_cli_import_writes_a_folder_that_loads_bit_exactly(bert_dir: Path, tmp_path: Path):
    out = tmp_path / "bert"
    proc = run_cli("import", str(bert_dir), "--out", str(out))
    assert "bert (BertEncoder" in proc.stdout
    assert {p.name for p in out.iterdir()} == {
        "attnkit.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    original, imported = load_pretrained(bert_dir), load_pretrained(out)
    assert isinstance(imported.model, BertEncoder) and imported.name == "bert"
    _same_weights(original.model, imported.model)
    assert imported.tokenizer == original.tokenizer
    assert torch.equal(imported.embed(["a good film", "Café!"]), original.embed(["a good film", "Café!"]))
    assert json.loads((out / "attnkit.json").read_text())["source"].endswith("(bert)")


def test_import_keeps_tied_gpt2_weights_shared(gpt2_dir: Path, tmp_path: Path):
    import_model(gpt2_dir, tmp_path / "gpt2")
    original, imported = load_pretrained(gpt2_dir), load_pretrained(tmp_path / "gpt2")
    model = imported.model
    assert isinstance(model, LanguageModel) and model.lm_head.weight is model.token_embedding.weight
    _same_weights(original.model, model)
    prompt = torch.tensor([[5, 6, 7]])
    assert torch.equal(
        model.generate(prompt, 10, temperature=0.0), original.model.generate(prompt, 10, temperature=0.0)
    )
    assert imported.generate("the film", 8) == original.generate("the film", 8)


def test_save_and_load_any_registered_model(tmp_path: Path):
    model = LanguageModel(
        LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=1, positional="rotary")
    )
    save_model(model, tmp_path / "lm", task="lm")
    loaded = load_model(tmp_path / "lm")
    _same_weights(model, loaded)
    assert loaded.config == model.config and not loaded.training
    with pytest.raises(ValueError, match=r"not a registered attnkit model"):
        save_model(torch.nn.Linear(2, 2), tmp_path / "linear")


def test_broken_attnkit_folders(tmp_path: Path):
    model = LanguageModel(LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=1))
    folder = save_model(model, tmp_path / "lm")
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:100])
    with pytest.raises(CheckpointError, match=r"not a valid safetensors file, truncated or corrupt"):
        load_model(folder)
    (folder / "model.safetensors").write_bytes(weights)
    info = json.loads((folder / "attnkit.json").read_text())
    info["model"]["config"]["num_layers"] = 2
    (folder / "attnkit.json").write_text(json.dumps(info))
    with pytest.raises(
        CheckpointError, match=r"(?s)does not fit the model described in attnkit.json.*Missing.*decoder.layers.1"
    ):
        load_model(folder)
    info["model"]["config"]["d_modle"] = 16
    (folder / "attnkit.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"invalid model config in .*attnkit.json:\n  d_modle: unknown key"):
        load_model(folder)
    (folder / "attnkit.json").write_text(json.dumps({**info, "version": 99}))
    with pytest.raises(ConfigError, match=r"unsupported version 99"):
        load_pretrained(folder)
