"""LoRA fine-tuning of the lm task (``model.init`` + ``model.lora``): only the adapters train, checkpoints
hold only them (and a reference to the base), loaded/resumed runs give the same model, and
``attnkit export --merge`` writes base + adapters as a plain model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import QUIET_TRAINING
from click.testing import CliRunner

from attnkit.api import build_config, train
from attnkit.cli import main
from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop import load_model
from attnkit.models import LanguageModel
from attnkit.models.lora import base_fingerprint, base_state_dict, is_lora, trainable_share
from attnkit.tasks import evaluate, load_run
from attnkit.tasks.lm import generate_from_run
from attnkit.training.checkpoint import load_checkpoint_file

COMMON = {"data.builtin_documents": 300, "model.max_len": 32, **QUIET_TRAINING}
BASE = {"model.d_model": 64, "model.num_layers": 2, "model.num_heads": 2, "model.dim_feedforward": 128}
LORA = {"rank": 4, "alpha": 8, "targets": ["qkv", "out", "ffn"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("lora")
    base = train("lm", output_dir=str(out), name="base", **{**COMMON, **BASE, "trainer.max_epochs": 1})
    lora = train(
        "lm", output_dir=str(out), name="lora", **{**COMMON, "trainer.max_epochs": 1, "optim.max_iters": 1000},
        **{"model.init": str(base.run_dir), "model.lora": LORA},
    )  # fmt: skip
    return {"out": out, "base": base, "lora": lora}


def ids() -> torch.Tensor:
    return torch.randint(4, 20, (3, 16), generator=torch.Generator().manual_seed(0))


def test_a_lora_run_changes_only_the_adapters(runs: dict) -> None:
    base_model = load_run(runs["base"].run_dir).module.model
    trained = runs["lora"].module.model
    assert is_lora(trained)
    after = base_state_dict(trained)
    before = base_model.state_dict()
    assert sorted(after) == sorted(before)
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), f"base tensor {name} changed"
    adapters = {n: p for n, p in trained.named_parameters() if p.requires_grad}
    assert adapters and all(".lora_A." in n or ".lora_B." in n for n in adapters)
    assert any(".lora_B." in n and p.abs().sum() > 0 for n, p in adapters.items())  # B started at zero
    n_train, n_all = trainable_share(trained)
    assert 0 < n_train < n_all / 4


def test_checkpoints_hold_only_the_adapters_and_a_reference_to_the_base(runs: dict) -> None:
    run_dir = runs["lora"].run_dir
    trained = runs["lora"].module.model
    for name in ("best.ckpt", "last.ckpt"):
        ckpt = load_checkpoint_file(run_dir / "checkpoints" / name)
        keys = set(ckpt["state_dict"])
        assert keys == {f"model.{n}" for n, p in trained.named_parameters() if p.requires_grad}
        reference = ckpt["lora_base"]
        assert reference["init"] == str(runs["base"].run_dir)
        assert reference["sha256"] == base_fingerprint(load_run(runs["base"].run_dir).module.model)


def test_a_loaded_run_is_base_plus_adapters(runs: dict) -> None:
    loaded = load_run(runs["lora"].run_dir).module.model
    trained = runs["lora"].module.model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(ids()), trained(ids()))
    # generate, predict and test work from the run folder
    (text,) = generate_from_run(runs["lora"].run_dir, "the", max_new_tokens=8, temperature=0.0)
    assert text.startswith("the")
    metrics = evaluate(runs["lora"].run_dir)
    assert metrics["test/loss"] == pytest.approx(runs["lora"].metrics["test/loss"], rel=1e-5)


def test_export_merge_equals_base_plus_adapters(runs: dict, tmp_path: Path) -> None:
    runner = CliRunner()
    run_dir = str(runs["lora"].run_dir)
    refused = runner.invoke(main, ["export", run_dir, "--out", str(tmp_path / "plain")])
    assert refused.exit_code != 0 and "add --merge" in refused.output
    done = runner.invoke(main, ["export", run_dir, "--merge", "--out", str(tmp_path / "merged")])
    assert done.exit_code == 0, done.output
    merged = load_model(tmp_path / "merged")
    assert type(merged) is LanguageModel and not is_lora(merged)
    with torch.no_grad():
        wrapped = load_run(run_dir).module.model(ids())
        assert (merged(ids()) - wrapped).abs().max() <= 1e-5
    # the export is itself a base for the lm task (tokenizer in its artifacts)
    cfg = build_config("lm", overrides={**COMMON, "model.init": str(tmp_path / "merged"), "model.lora": LORA})
    assert cfg.model.lora is not None and cfg.model.lora.rank == 4


def test_resuming_keeps_the_base_frozen_and_continues(runs: dict, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(runs["lora"].run_dir, tmp_path / "lora"))
    resumed = train("lm", resume=run_dir, **{"trainer.max_epochs": 2})
    assert resumed.run_dir == run_dir
    before = load_run(runs["base"].run_dir).module.model.state_dict()
    after = base_state_dict(resumed.module.model)
    assert all(torch.equal(after[k], v) for k, v in before.items())
    old = load_checkpoint_file(runs["lora"].run_dir / "checkpoints" / "last.ckpt")["state_dict"]
    new = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert old.keys() == new.keys()
    assert any(not torch.equal(old[k], new[k]) for k in old)  # the second epoch trained the adapters
    with torch.no_grad():
        assert torch.equal(load_run(run_dir).module.model(ids()), resumed.module.model.eval()(ids()))


def test_a_changed_or_missing_base_is_a_clear_error(runs: dict, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(runs["lora"].run_dir, tmp_path / "lora"))
    ckpt_path = run_dir / "checkpoints" / "best.ckpt"
    ckpt = load_checkpoint_file(ckpt_path)
    ckpt["lora_base"]["sha256"] = "0" * 64  # as if the base's weights had changed since training
    torch.save(ckpt, ckpt_path)
    with pytest.raises(CheckpointError, match=r"changed since these LoRA adapters were trained"):
        load_run(ckpt_path)

    base_copy = Path(shutil.copytree(runs["base"].run_dir, tmp_path / "base"))
    moved = tmp_path / "moved"
    shutil.copytree(runs["lora"].run_dir, moved)
    ckpt = load_checkpoint_file(moved / "checkpoints" / "best.ckpt")
    ckpt["hyper_parameters"]["config"]["model"]["init"] = str(base_copy)
    torch.save(ckpt, moved / "checkpoints" / "best.ckpt")
    load_run(moved / "checkpoints" / "best.ckpt")  # the same base elsewhere: fine
    shutil.rmtree(base_copy)
    with pytest.raises(CheckpointError, match=r"LoRA adapters trained on the base model.init=.*cannot be loaded"):
        load_run(moved / "checkpoints" / "best.ckpt")


def test_config_errors(runs: dict) -> None:
    with pytest.raises(ConfigError, match=r"model.lora trains adapters on a pretrained base: set model.init"):
        build_config("lm", overrides={"model.lora": {"rank": 4}})
    with pytest.raises(ConfigError, match=r"model.lora.targets"):
        build_config("lm", overrides={"model.init": "x", "model.lora": {"targets": ["query"]}})
    with pytest.raises(ConfigError, match=r"model.max_len=64 is longer than the context of model.init"):
        train("lm", output_dir=str(runs["out"]), name="long", **{**COMMON, "model.max_len": 64},
              **{"model.init": str(runs["base"].run_dir)})  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"model.init: no model at .*nope: nothing is there"):
        train("lm", output_dir=str(runs["out"]), name="none", **COMMON, **{"model.init": str(runs["out"] / "nope")})
