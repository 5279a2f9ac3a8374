"""attnkit model folders (safetensors + attnkit.json): written by import/export, loaded back bit-exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop import import_model, load_model, load_pretrained, pretrained_tokenizer, save_model
from attnkit.models import BertEncoder, LanguageModel, LanguageModelConfig
from attnkit.text.tokenizers import build_tokenizer


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


def _legacy(folder: Path) -> dict:
    """Rewrite ``folder``'s attnkit.json as attnkit wrote it before checksums (version 1, no hashes)."""
    info = json.loads((folder / "attnkit.json").read_text())
    info = {k: v for k, v in info.items() if k not in ("files", "sha256")} | {"version": 1}
    (folder / "attnkit.json").write_text(json.dumps(info, indent=2))
    return info


def test_broken_attnkit_folders(tmp_path: Path):
    model = LanguageModel(LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=1))
    folder = save_model(model, tmp_path / "lm")
    info = _legacy(folder)  # unchecked: the errors of the files themselves
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:100])
    with pytest.raises(CheckpointError, match=r"not a valid safetensors file, truncated or corrupt"):
        load_model(folder)
    (folder / "model.safetensors").write_bytes(weights)
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
    for version in (99, True, 1.0):  # True == 1.0 == 1 in Python: not version 1 all the same
        (folder / "attnkit.json").write_text(json.dumps({**info, "version": version}))
        with pytest.raises(ConfigError, match=rf"unsupported version {version!r}"):
            load_pretrained(folder)


def _flip_bit(path: Path, pos: int) -> None:
    blob = bytearray(path.read_bytes())
    blob[pos] ^= 0x01
    path.write_bytes(bytes(blob))


def _folder_with_everything(tmp_path: Path) -> tuple[LanguageModel, Path]:
    model = LanguageModel(LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=1))
    tokenizer = build_tokenizer("char", ["the cat sat", "on the mat"])
    extra = {"chat_template.jinja": "{{ messages[0]['content'] }}", "generation_config.json": '{"temperature": 0.7}\n'}
    return model, save_model(model, tmp_path / "lm", tokenizer=tokenizer, extra_files=extra)


def test_every_file_of_a_model_folder_is_hashed_and_a_flipped_bit_is_refused(tmp_path: Path):
    model, folder = _folder_with_everything(tmp_path)
    info = json.loads((folder / "attnkit.json").read_text())
    assert info["version"] == 2 and set(info["files"]) | {"attnkit.json"} == {p.name for p in folder.iterdir()}
    loaded = load_pretrained(folder)  # intact: loads, checked
    _same_weights(model, loaded.model)
    assert loaded.generation_config == {"temperature": 0.7} and loaded.chat_template is not None
    weights = folder / "model.safetensors"
    blob = weights.read_bytes()
    data_start = 8 + int.from_bytes(blob[:8], "little")
    for name in info["files"]:
        path = folder / name
        original = path.read_bytes()
        # model.safetensors: the lowest bit of the last weight (a float32 that still reads); else mid-file
        _flip_bit(path, len(original) - 1 if name == "model.safetensors" else len(original) // 2)
        assert name != "model.safetensors" or len(original) - 1 >= data_start
        message = rf"{name}: its content does not match what was written .*attnkit export RUN --out DIR"
        with pytest.raises(CheckpointError, match=message):
            load_pretrained(folder)
        if name == "model.safetensors":
            with pytest.raises(CheckpointError, match=message):
                load_model(folder)
        elif name.startswith("tokenizer"):
            with pytest.raises(CheckpointError, match=message):
                pretrained_tokenizer(folder)
        path.unlink()
        missing = rf"has attnkit.json but no {name}|{name}: the file is missing, but attnkit.json lists it"
        with pytest.raises(CheckpointError, match=missing):
            load_pretrained(folder)
        path.write_bytes(original)
    load_pretrained(folder)


def test_an_edited_attnkit_json_is_refused(tmp_path: Path):
    _, folder = _folder_with_everything(tmp_path)
    path = folder / "attnkit.json"
    text = path.read_text()
    # a flipped bit in a value that still validates: eos_id 2 -> 3 would change generation silently
    assert text.count('"eos_id": 2') == 1
    path.write_text(text.replace('"eos_id": 2', '"eos_id": 3'))
    own = r"attnkit.json: its content does not match what was written \(its own SHA-256, 'sha256'\)"
    with pytest.raises(CheckpointError, match=own):
        load_pretrained(folder)
    info = json.loads(text)
    for key in ("files", "sha256"):  # without its hashes, a version 2 folder is refused, not loaded unchecked
        path.write_text(json.dumps({k: v for k, v in info.items() if k != key}))
        with pytest.raises(CheckpointError, match=r"attnkit.json: 'files' .* or 'sha256' .* is missing"):
            load_pretrained(folder)


def test_a_folder_written_before_checksums_loads_unchecked(tmp_path: Path):
    model, folder = _folder_with_everything(tmp_path)
    _legacy(folder)
    _same_weights(model, load_pretrained(folder).model)
    _flip_bit(folder / "tokenizer_config.json", 0)  # "{" -> "z": what the file's own reader says
    with pytest.raises(ValueError, match=r"tokenizer_config.json"):
        load_pretrained(folder)


def test_export_lists_a_runs_chat_files_with_the_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import types

    from attnkit.api import models as api_models
    from attnkit.data.lm.blocks import artifacts_of

    model = LanguageModel(LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=1))
    artifacts = artifacts_of(build_tokenizer("char", ["the cat sat", "on the mat"]))
    artifacts |= {"chat_template": "{{ messages[0]['content'] }}", "generation_config": {"temperature": 0.7}}
    run = types.SimpleNamespace(  # what load_run gives for an sft run: its model, task and artifacts
        module=types.SimpleNamespace(model=model),
        task=types.SimpleNamespace(name="sft"),
        hparams={"artifacts": artifacts},
        checkpoint=tmp_path / "run" / "best.ckpt",
    )
    monkeypatch.setattr(api_models, "load_run", lambda path: run)
    folder = api_models.export(tmp_path / "run", tmp_path / "out").out
    files = json.loads((folder / "attnkit.json").read_text())["files"]
    assert set(files) == {"model.safetensors", "chat_template.jinja", "generation_config.json"}
    loaded = load_pretrained(folder)
    assert loaded.chat_template is not None and loaded.generation_config == {"temperature": 0.7}
    _flip_bit(folder / "chat_template.jinja", 3)
    with pytest.raises(CheckpointError, match=r"chat_template.jinja: its content does not match what was written"):
        load_pretrained(folder)
