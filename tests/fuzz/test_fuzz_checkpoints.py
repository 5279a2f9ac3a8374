"""Fuzzing checkpoints and model folders: truncated, bit-flipped, keys missing or replaced, files
deleted; and `attnkit export / predict / import` on them (derandomized; tools/fuzz.py runs the
targets longer). Then the inputs the fuzzing found."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fuzz_checkpoint_targets  # noqa: F401  (registers the targets)
import pytest
import torch
from click.testing import CliRunner
from fuzz_core import Assets, Leak, Target, copy_folder, require_intact, run_target, targets

from attnkit.cli import main
from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop.pretrained import load_pretrained
from attnkit.interop.weights import read_weights
from attnkit.tasks import load_run
from attnkit.training.checkpoint import load_checkpoint_file


@pytest.mark.parametrize(
    "target",
    targets("checkpoints.") + targets("models.") + targets("cli.checkpoints") + targets("cache."),
    ids=lambda t: t.name,
)
def test_fuzz(target: Target, fuzz_assets: Assets):
    assert run_target(target, fuzz_assets) > 0


# --------------------------------------------------------------------- inputs the fuzzing found
def _corrupt_pickle(tmp_path: Path, name: str) -> Path:
    """A torch file whose pickled string "reverse" has a byte that is not UTF-8 (a bit flip)."""
    out = io.BytesIO()
    torch.save({"hyper_parameters": {"task": "reverse"}, "w": torch.zeros(2)}, out)
    blob = out.getvalue()
    assert blob.count(b"reverse") == 1
    path = tmp_path / name
    path.write_bytes(blob.replace(b"reverse", b"rev\x80rse"))
    return path


def test_a_bit_flip_in_a_checkpoints_pickle_is_a_checkpoint_error(tmp_path: Path):
    # torch.load raised UnicodeDecodeError (other flips: KeyError, IndexError: pop from empty list)
    path = _corrupt_pickle(tmp_path, "best.ckpt")
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint .*best.ckpt: the file is truncated or corrupt"):
        load_checkpoint_file(path)
    with pytest.raises(CheckpointError, match=r"cannot read .*pytorch_model.bin: truncated, corrupt"):
        read_weights(_corrupt_pickle(tmp_path, "pytorch_model.bin"))


@pytest.mark.parametrize(
    ("kind", "file", "key", "value", "match"),
    [
        ("gpt2", "config.json", "model_type", [], r"config.json: model_type \[\] .* is not supported"),
        ("llama", "config.json", "num_attention_heads", None, r"config.json: invalid llama config: a value of"),
        ("llama", "config.json", "rope_parameters", {"rope_theta": []}, r"config.json: invalid llama config"),
        ("gpt2", "config.json", "activation_function", [], r"config.json: this GPT-2 variant is not supported"),
        ("gpt2", "config.json", "n_head", 0, r"config.json: invalid GPT-2 config"),
        ("attnkit", "attnkit.json", "model", {"name": [], "config": {}}, r"attnkit.json: 'model' must be"),
    ],
)
def test_a_model_folder_value_of_the_wrong_type_is_a_config_error(
    fuzz_assets: Assets, tmp_path: Path, kind: str, file: str, key: str, value: object, match: str
):
    # each raised TypeError (unhashable type, unsupported operand) or ZeroDivisionError
    source = fuzz_assets.model_dir if kind == "attnkit" else fuzz_assets.hf_dir(kind)
    folder = copy_folder(source, tmp_path / "model")
    data = json.loads((folder / file).read_text())
    data[key] = value
    (folder / file).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=match):
        load_pretrained(folder)


@pytest.mark.parametrize(
    "hparams", [{"task": "reverse"}, {"task": ["reverse"], "config": {}}, {"task": "reverse", "config": 3}]
)
def test_a_checkpoint_without_its_task_or_config_is_a_checkpoint_error(
    fuzz_assets: Assets, tmp_path: Path, hparams: dict
):
    # a missing "config" was a KeyError, a list for "task" a TypeError (unhashable type)
    checkpoint = {**fuzz_assets.checkpoint, "hyper_parameters": hparams}
    (tmp_path / "checkpoints").mkdir()
    torch.save(checkpoint, tmp_path / "checkpoints" / "best.ckpt")
    with pytest.raises(CheckpointError, match=r"best.ckpt is not an attnkit checkpoint"):
        load_run(tmp_path)


def test_a_path_with_a_nul_byte_is_a_usage_error():
    # click.Path's os.stat raised ValueError: embedded null byte, a traceback
    result = CliRunner().invoke(main, ["train", "reverse", "--print-config", "--data", "a\x00b"])
    assert result.exit_code == 2 and "is not a usable path" in result.output and "Traceback" not in result.output


def test_a_bit_flipped_in_a_tensor_is_a_checkpoint_error_not_another_weight(fuzz_assets: Assets, tmp_path: Path):
    """torch.load does not check the zip's CRC-32s: a flipped bit of a weight loaded silently as another
    weight (the fuzzing's oracle now requires a checkpoint that loads to be the one written)."""
    import struct
    import zipfile

    blob = bytearray(fuzz_assets.checkpoint_bytes)
    with zipfile.ZipFile(io.BytesIO(bytes(blob))) as zf:
        tensor = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    names, extra = struct.unpack("<HH", blob[tensor.header_offset + 26 : tensor.header_offset + 30])
    blob[tensor.header_offset + 30 + names + extra + tensor.file_size // 2] ^= 0x10
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.ckpt").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match=r"best.ckpt: the file is truncated or corrupt \(BadZipFile: Bad CRC-32"):
        load_run(tmp_path)
    # the oracle: the same content passes, other content is a Leak
    require_intact(None, fuzz_assets.checkpoint, "refused")
    require_intact(load_checkpoint_file(fuzz_assets.run_dir / "checkpoints" / "best.ckpt"), fuzz_assets.checkpoint, "x")
    changed = {**fuzz_assets.checkpoint, "state_dict": dict(fuzz_assets.checkpoint["state_dict"])}
    name, weight = next(iter(changed["state_dict"].items()))
    changed["state_dict"][name] = weight.clone().reshape(-1).index_fill_(0, torch.tensor([0]), 0.5).view_as(weight)
    with pytest.raises(Leak, match="loaded without an error as other content"):
        require_intact(changed, fuzz_assets.checkpoint, "changed")
