"""Tiny trained runs of the encoder tasks (trained once per session) and a headless-Chromium helper."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import attnkit

sys.path.insert(0, str(Path(__file__).parents[1] / "training"))  # the CLI helper shared with tests/training

FAST = {"trainer.threads": 1, "trainer.progress_bar": False}
TINY_REVERSE = {
    "data.train_size": 4000,
    "data.val_size": 128,
    "data.test_size": 256,
    "data.seq_len": 8,
    "trainer.max_epochs": 2,
    "trainer.batch_size": 32,
    "optim.lr": 2e-3,
    "optim.warmup": 20,
    "trainer.log_every_n_steps": 10,
}


@pytest.fixture(scope="session")
def reverse_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reverse task, 2 short epochs (reaches ~90 % accuracy): 1 layer, 1 head, sequences of 8."""
    root = tmp_path_factory.mktemp("runs")
    return attnkit.train("reverse", output_dir=str(root), name="tiny", **FAST, **TINY_REVERSE).run_dir


@pytest.fixture(scope="session")
def anomaly_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The anomaly task on digits, one short epoch: 2 layers of 4 heads, sets of 10."""
    root = tmp_path_factory.mktemp("runs")
    overrides = {
        "data.train_sets": 256,
        "data.val_sets": 16,
        "data.test_sets": 16,
        "trainer.max_epochs": 1,
        "trainer.log_every_n_steps": 1,
        "model.d_model": 32,
        "model.dim_feedforward": 64,
        "optim.warmup": 2,
    }
    return attnkit.train("anomaly", output_dir=str(root), name="tiny", **FAST, **overrides).run_dir


@pytest.fixture(scope="session")
def classify_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The classify task on the built-in corpus, one epoch of a 1-layer, 2-head model."""
    root = tmp_path_factory.mktemp("runs")
    overrides = {
        "trainer.max_epochs": 1,
        "trainer.log_every_n_steps": 10,
        "model.d_model": 16,
        "model.dim_feedforward": 32,
        "model.num_layers": 1,
        "model.num_heads": 2,
        "data.max_len": 24,
    }
    return attnkit.train("classify", output_dir=str(root), name="tiny", **FAST, **overrides).run_dir
