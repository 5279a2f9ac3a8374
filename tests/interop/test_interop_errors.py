"""Bad pretrained folders fail with errors that say what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop import load_pretrained


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_unsupported_architecture_names_the_supported_ones(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "falcon", "architectures": ["FalconForCausalLM"]}))
    with pytest.raises(
        ConfigError,
        match=r"model_type 'falcon' \(FalconForCausalLM\) is not supported.*bert.*gpt2.*llama.*mistral.*qwen2",
    ):
        load_pretrained(tmp_path)


def test_unsupported_variants_of_supported_types(bert_dir: Path, gpt2_dir: Path, tmp_path: Path):
    bert = _copy(bert_dir, tmp_path / "bert")
    _edit_config(bert, position_embedding_type="relative_key")
    with pytest.raises(ConfigError, match=r"position_embedding_type='relative_key'"):
        load_pretrained(bert)
    gpt2 = _copy(gpt2_dir, tmp_path / "gpt2")
    _edit_config(gpt2, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ConfigError, match=r"scale_attn_by_inverse_layer_idx"):
        load_pretrained(gpt2)


def test_config_and_weights_disagree(bert_dir: Path, gpt2_dir: Path, tmp_path: Path):
    wider = _copy(bert_dir, tmp_path / "wider")
    _edit_config(wider, hidden_size=64, num_attention_heads=4)
    with pytest.raises(CheckpointError, match=r"does not match its config") as err:
        load_pretrained(wider)
    assert "wrong shape" in str(err.value) and "embeddings.word_embeddings.weight: shape (" in str(err.value)

    deeper = _copy(gpt2_dir, tmp_path / "deeper")
    _edit_config(deeper, n_layer=3)
    with pytest.raises(CheckpointError, match=r"missing \(12\): h\.2\.attn\.c_attn\.bias; h\.2\.attn\.c_attn\.weight"):
        load_pretrained(deeper)

    extra = _copy(bert_dir, tmp_path / "extra")
    tensors = load_file(extra / "model.safetensors")
    tensors["encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(2)
    save_file(tensors, extra / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected \(1\): encoder.layer.0.attention.self.rotary.weight"):
        load_pretrained(extra)

    missing = _copy(bert_dir, tmp_path / "missing")
    tensors = load_file(missing / "model.safetensors")
    del tensors["encoder.layer.1.attention.self.key.bias"]
    save_file(tensors, missing / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing \(1\): encoder.layer.1.attention.self.key.bias"):
        load_pretrained(missing)

    tokens = _copy(bert_dir, tmp_path / "tokens")
    _edit_config(tokens, vocab_size=50)
    with pytest.raises(CheckpointError, match=r"word_embeddings"):
        load_pretrained(tokens)


def test_corrupt_weight_files(bert_dir: Path, tmp_path: Path):
    truncated = _copy(bert_dir, tmp_path / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"not a valid safetensors file, truncated or corrupt"):
        load_pretrained(truncated)
    garbage = _copy(bert_dir, tmp_path / "garbage")
    (garbage / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match=r"truncated or corrupt"):
        load_pretrained(garbage)

    pickled = _copy(bert_dir, tmp_path / "pickled")
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"not a zip file")
    with pytest.raises(CheckpointError, match=r"cannot read .*pytorch_model.bin: truncated, corrupt"):
        load_pretrained(pickled)

    (pickled / "pytorch_model.bin").unlink()
    with pytest.raises(CheckpointError, match=r"no weights in .*expected one of model.safetensors"):
        load_pretrained(pickled)


def test_not_a_model_folder(tmp_path: Path, bert_dir: Path):
    with pytest.raises(FileNotFoundError, match=r"no pretrained model at"):
        load_pretrained(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"not a model folder: expected config.json .* or attnkit.json"):
        load_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"is a file: pass the model's folder"):
        load_pretrained(bert_dir / "config.json")
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(ConfigError, match=r"config.json is not valid JSON"):
        load_pretrained(tmp_path)
