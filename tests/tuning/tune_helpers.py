"""Shared by the tuning tests: a tiny reverse setup and a subprocess runner for the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna

# Reverse on tiny data: a trial trains in about a second on an idle core.
TINY = {
    "data.train_size": 1200,
    "data.val_size": 96,
    "data.test_size": 96,
    "data.seq_len": 6,
    "trainer.max_epochs": 2,
    "trainer.batch_size": 32,
    "optim.warmup": 10,
}
TINY_ARGS = [f"{k}={v}" for k, v in TINY.items()]

SPACE_YAML = """\
optim.lr: {low: 2.0e-3, high: 2.0e-2, log: true}
model:
  d_model: [16, 32]
  num_heads: [1, 2]
"""


def env() -> dict[str, str]:
    out = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out.pop("ATTNKIT_RUN_DIR", None)
    return out


def cli(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `attnkit` entry point in a subprocess, one torch thread."""
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def load(db: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
