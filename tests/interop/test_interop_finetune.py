"""Fine-tuning a pretrained encoder with the classify task (``model.init`` / ``--init``), and exporting runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli

from attnkit.api import build_config
from attnkit.errors import ConfigError
from attnkit.interop import import_model, load_encoder, load_model, read_model_info
from attnkit.models import BertClassifier
from attnkit.tasks import get_task, load_run
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.runner import build_module
from cli_inprocess import cli_ok

FINETUNE = [
    "data.max_len=32",
    "trainer.max_epochs=6",
    "trainer.batch_size=16",
    "trainer.threads=1",
    "trainer.progress_bar=false",
    "optim.lr=2e-3",
    "optim.warmup=10",
]


def _module(init: Path, csv: Path, **overrides: object):
    """What the runner builds for a new classify run with ``model.init`` (before training)."""
    task = get_task("classify")
    cfg = build_config("classify", overrides={"model.init": str(init), "data.source": str(csv), **overrides})
    dm = task.build_datamodule(cfg)
    dm.setup("fit")
    return build_module(task, cfg, dm), dm


@pytest.mark.parametrize("imported", [False, True])
def test_init_starts_from_the_pretrained_encoder_and_tokenizer(
    imported: bool, bert_dir: Path, reviews_csv: Path, tmp_path: Path
):
    init = bert_dir
    if imported:  # an `attnkit import` folder works as well as the Hugging Face folder
        import_model(bert_dir, tmp_path / "imported")
        init = tmp_path / "imported"
    module, dm = _module(init, reviews_csv, **{"data.max_len": 32, "model.pooling": "cls", "model.dropout": 0.2})
    model = module.model
    assert isinstance(model, BertClassifier) and model.config.num_classes == 2
    assert model.config.pooling == "cls" and model.config.dropout == 0.2 and model.config.d_model == 32
    encoder = load_encoder(bert_dir).state_dict()
    assert set(model.bert.state_dict()) == set(encoder)
    assert all(torch.equal(model.bert.state_dict()[k], v) for k, v in encoder.items())
    # The data are encoded by the pretrained tokenizer: [CLS] ... [SEP], padded with [PAD].
    assert (
        isinstance(dm.tokenizer, Tokenizer) and dm.tokenizer.kind == "pretrained" and dm.pad_id == dm.tokenizer.pad_id
    )
    ids, mask, _ = next(iter(dm.train_dataloader()))
    assert (ids[:, 0] == dm.tokenizer.cls_id).all()
    assert (ids[~mask] == dm.tokenizer.pad_id).all()
    assert ids.shape[1] <= 32


def test_init_checks_lengths_and_kind(bert_dir: Path, gpt2_dir: Path, reviews_csv: Path):
    with pytest.raises(ConfigError, match=r"data.max_len=256 is longer than the pretrained encoder's 64 positions"):
        _module(bert_dir, reviews_csv)
    with pytest.raises(ConfigError, match=r"holds a 'gpt2' model, not a BERT-family encoder"):
        _module(gpt2_dir, reviews_csv, **{"data.max_len": 32})
    with pytest.raises(ConfigError, match=r"model.init: unknown key"):  # only classify starts from an encoder
        build_config("reverse", overrides={"model.init": str(bert_dir)})


@pytest.mark.slow
def test_finetune_predict_and_export_through_the_cli(bert_dir: Path, reviews_csv: Path, tmp_path: Path):
    init = shutil.copytree(bert_dir, tmp_path / "bert")
    run_cli("train", "classify", "--init", str(init), "--output_dir", str(tmp_path), "name=ft",
            f"data.source={reviews_csv}", *FINETUNE)  # fmt: skip
    run = tmp_path / "classify" / "ft"
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["test/acc"] >= 0.9, metrics  # chance is 0.5
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["init"] == str(init)

    shutil.rmtree(init)  # the checkpoint alone (with the tokenizer in its artifacts) predicts
    out = cli_ok("predict", str(run), "A wonderful film and a great story.", "The plot was awful.").stdout
    assert [line.split("\t")[0] for line in out.strip().splitlines()] == ["positive", "negative"]

    cli_ok("export", str(run), "--out", str(tmp_path / "exported"))
    exported = load_model(tmp_path / "exported")
    trained = load_run(run).module.model
    assert type(exported) is BertClassifier
    for name, tensor in trained.state_dict().items():
        assert torch.equal(exported.state_dict()[name], tensor), name  # bit-exact
    info = read_model_info(tmp_path / "exported")
    assert info["task"] == "classify" and info["artifacts"]["label_names"] == ["negative", "positive"]
