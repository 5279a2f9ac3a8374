"""`resolve_model`: what is at a path (a run, an attnkit model folder, a Hugging Face folder), the one answer
every command and `model.init` gives, and the one error (listing the kinds) for anything else."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attnkit.errors import CheckpointError
from attnkit.interop import SUPPORTED_MODEL_TYPES
from attnkit.training.resolve import ModelPathError, ResolvedModel, model_kinds, resolve_model

KINDS = ("an attnkit run", "an attnkit model folder", "a Hugging Face model folder")


def _run(folder: Path, *names: str) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    for name in names:
        (folder / "checkpoints" / name).write_bytes(b"")
    return folder


def _folder(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text("{}")
    return folder


def test_each_kind(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", "best.ckpt", "last.ckpt")
    assert resolve_model(run) == ResolvedModel("run", run, run / "checkpoints" / "best.ckpt", run)
    only_last = _run(tmp_path / "killed", "last.ckpt")
    assert resolve_model(str(only_last)).checkpoint == only_last / "checkpoints" / "last.ckpt"
    ckpt = run / "checkpoints" / "last.ckpt"
    assert resolve_model(ckpt) == ResolvedModel("run", ckpt, ckpt, run)
    loose = tmp_path / "model.ckpt"
    loose.write_bytes(b"")
    assert resolve_model(loose) == ResolvedModel("run", loose, loose, None)  # outside a run's checkpoints/
    attnkit_folder = _folder(tmp_path / "exported", "attnkit.json", "config.json")  # attnkit.json wins
    assert resolve_model(attnkit_folder) == ResolvedModel("model_folder", attnkit_folder)
    hf = _folder(tmp_path / "hf", "config.json")
    assert resolve_model(hf) == ResolvedModel("hf_folder", hf)
    assert resolve_model(hf).is_model_folder and not resolve_model(run).is_model_folder
    (run / "config.json").write_text("{}")  # a run folder with a config.json is still a run
    assert resolve_model(run).kind == "run"
    resolved = resolve_model(hf)
    assert resolve_model(resolved) is resolved


def test_a_symlink_is_followed_and_kept_as_given(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", "best.ckpt")
    link = tmp_path / "latest"
    link.symlink_to(run, target_is_directory=True)
    assert resolve_model(link) == ResolvedModel("run", link, link / "checkpoints" / "best.ckpt", link)
    hf = _folder(tmp_path / "hf", "config.json")
    (tmp_path / "hf-link").symlink_to(hf, target_is_directory=True)
    assert resolve_model(tmp_path / "hf-link") == ResolvedModel("hf_folder", tmp_path / "hf-link")
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "gone")
    with pytest.raises(ModelPathError, match=f"a broken symbolic link \\(to {tmp_path / 'gone'}"):
        resolve_model(broken)


def _message(path: Path, **kw: Any) -> str:
    with pytest.raises(ModelPathError) as info:
        resolve_model(path, **kw)
    text = str(info.value)
    assert text.startswith(f"{kw['role']}: " if kw else "no model at")
    assert text.endswith(model_kinds()) and all(kind in text for kind in KINDS)
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, FileNotFoundError)
    return text


def test_what_is_not_a_model_gets_the_one_error(tmp_path: Path) -> None:
    assert "nothing is there" in _message(tmp_path / "nowhere")
    assert "model.init: no model at" in _message(tmp_path / "nowhere", role="model.init")
    assert "an empty folder" in _message(_folder(tmp_path / "empty"))
    notes = _folder(tmp_path / "notes", "README.md")
    assert "a folder with neither checkpoints/ (a run) nor attnkit.json or config.json" in _message(notes)
    runs = _run(tmp_path / "runs" / "lm" / "2026-01-01", "best.ckpt").parent  # the task's folder, not a run
    assert f"it holds {runs / '2026-01-01'}: pass one of those" in _message(runs)
    checkpoints = tmp_path / "runs" / "lm" / "2026-01-01" / "checkpoints"
    assert "a folder of checkpoint files (best.ckpt); pass one of them" in _message(checkpoints)


def test_a_file_instead_of_a_folder(tmp_path: Path) -> None:
    hf = _folder(tmp_path / "hf", "config.json")
    (hf / "model.safetensors").write_bytes(b"")
    assert f"a file of the model folder {hf}; pass the folder itself" in _message(hf / "config.json")
    assert f"a file of the model folder {hf}" in _message(hf / "model.safetensors")
    text = tmp_path / "weights.pt"
    text.write_bytes(b"")
    assert "a file that is not a .ckpt checkpoint" in _message(text)


def test_a_run_without_a_checkpoint(tmp_path: Path) -> None:
    fresh = _run(tmp_path / "fresh")
    assert "a run folder without checkpoints/best.ckpt or last.ckpt (it has saved no checkpoint yet)" in _message(fresh)
    epochs = _run(tmp_path / "epochs", "epoch=1.ckpt", "epoch=0.ckpt")
    assert "(its checkpoints/ holds epoch=0.ckpt, epoch=1.ckpt: pass one of those files)" in _message(epochs)


def test_the_kinds_list_the_supported_model_types() -> None:
    types = list(SUPPORTED_MODEL_TYPES)
    assert len(types) >= 2
    assert model_kinds().endswith(f"of model_type {', '.join(types[:-1])} or {types[-1]}")
    with pytest.raises(TypeError, match="a model path is a str or a Path, got int 3"):
        resolve_model(3)  # type: ignore[arg-type]


def _entry_points() -> dict[str, Callable[[Path], Any]]:
    from attnkit import api
    from attnkit.tasks import load_model, load_run
    from attnkit.tasks.lm import load_lm_base
    from attnkit.tasks.sft import base_chat
    from attnkit.viz.explorer.views import load_explorer

    return {
        "load_model": load_model,
        "load_run": load_run,
        "export": lambda p: api.export(p, p.parent / "out"),
        "export hf": lambda p: api.export(p, p.parent / "out", format="hf"),
        "explore": load_explorer,
        "lm model.init": load_lm_base,
        "sft model.init": base_chat,
    }


@pytest.mark.parametrize("name", list(_entry_points()))
def test_every_entry_point_asks_the_resolver(name: str, tmp_path: Path) -> None:
    """Each command's way in (and lm/sft's model.init) gives the resolver's one error for a folder of no kind."""
    notes = _folder(tmp_path / "notes", "README.md")
    with pytest.raises(ModelPathError) as info:
        _entry_points()[name](notes)
    assert "a folder with neither checkpoints/" in str(info.value)
    assert str(info.value).endswith(model_kinds())
    assert str(info.value).startswith("model.init: " if "model.init" in name else "no model at")


def test_a_symlinked_run_loads_as_the_run(tmp_path: Path) -> None:
    from attnkit import api

    result = api.train(
        "reverse",
        model={"d_model": 8, "num_heads": 1, "num_layers": 1, "dim_feedforward": 8},
        data={"train_size": 8, "val_size": 4, "test_size": 4, "seq_len": 4},
        trainer={"max_epochs": 1, "batch_size": 4, "progress_bar": False, "threads": 1, "report": False},
        output_dir=str(tmp_path / "runs"),
    )
    link = tmp_path / "latest"
    os.symlink(result.run_dir, link, target_is_directory=True)
    loaded = api.load_run(link)
    assert loaded.run_dir == link and loaded.checkpoint.name == "best.ckpt"
    assert loaded.task.name == "reverse"


def test_a_run_is_not_loaded_as_a_model_folder(tmp_path: Path) -> None:
    from attnkit.training.model_folders import load_model_folder

    run = _run(tmp_path / "run", "best.ckpt")
    with pytest.raises(CheckpointError, match="is an attnkit run, not a model folder: load it with load_run"):
        load_model_folder(run, {})
