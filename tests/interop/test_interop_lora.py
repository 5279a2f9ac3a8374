"""LoRA fine-tuning of a pretrained BERT with the classify task (``--init`` + ``model.lora``): the
encoder stays bit-for-bit the pretrained one, only the adapters and the new head train, and the
merged export equals encoder + adapters. (Here rather than in tests/training: it uses this folder's
tiny BERT built with ``transformers``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import QUIET_TRAINING
from click.testing import CliRunner

from attnkit.api import train
from attnkit.cli import main
from attnkit.interop import load_encoder, load_model
from attnkit.models import BertClassifier
from attnkit.models.lora import base_fingerprint, base_state_dict, is_lora
from attnkit.tasks import load_run
from attnkit.training.checkpoint import load_checkpoint_file

LORA_FINETUNE = {"data.max_len": 32, "trainer.max_epochs": 10, "optim.lr": 1e-2, "optim.warmup": 10, **QUIET_TRAINING}


@pytest.fixture(scope="module")
def lora_run(bert_init_dir: Path, reviews_csv: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("classify-lora")
    overrides = {"model.init": str(bert_init_dir), "data.source": str(reviews_csv), "model.lora": {"rank": 4}}
    return train("classify", output_dir=str(out), name="lora", **LORA_FINETUNE, **overrides)


def test_only_adapters_and_head_train(lora_run, bert_init_dir: Path) -> None:
    model = lora_run.module.model
    assert isinstance(model, BertClassifier) and is_lora(model)
    pretrained = load_encoder(bert_init_dir).state_dict()
    after = base_state_dict(model.bert)
    assert sorted(after) == sorted(pretrained)
    for name, tensor in pretrained.items():
        assert torch.equal(after[name], tensor), f"encoder tensor {name} changed"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"head.weight", "head.bias"} <= trainable
    assert all(n.startswith("head.") or ".lora_" in n for n in trainable)
    assert lora_run.metrics["test/acc"] > 0.75, lora_run.metrics  # learned: 0.85 measured (chance 0.5)

    ckpt = load_checkpoint_file(lora_run.best_checkpoint)
    assert set(ckpt["state_dict"]) == {f"model.{n}" for n in trainable}
    assert ckpt["lora_base"]["init"] == str(bert_init_dir)
    assert ckpt["lora_base"]["sha256"] == base_fingerprint(model)


def test_loaded_run_and_merged_export_equal_the_trained_model(lora_run, tmp_path: Path) -> None:
    ids = torch.randint(5, 100, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 8:] = False
    trained = lora_run.module.model.eval()
    loaded = load_run(lora_run.run_dir).module.model
    with torch.no_grad():
        expected = trained(ids, mask)
        assert torch.equal(loaded(ids, mask), expected)
    result = CliRunner().invoke(main, ["export", str(lora_run.run_dir), "--merge", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    merged = load_model(tmp_path / "m")
    assert type(merged) is BertClassifier and not is_lora(merged)
    with torch.no_grad():
        assert (merged(ids, mask) - expected).abs().max() <= 1e-5
