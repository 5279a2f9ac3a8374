"""Smoke test of benchmarks/lora.py: it runs and prints its table (``--quick``: a tiny model, two
paired rounds). Timings are not tests: this never checks that LoRA is faster."""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import run_quick


def test_quick_run_prints_the_paired_rounds_and_writes_json(tmp_path: Path) -> None:
    json_path = tmp_path / "lora.json"
    proc = run_quick("lora.py", json_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert "initial weights identical: yes" in lines
    assert "| round | full fine-tuning ms/step | LoRA ms/step | full/LoRA | faster |" in lines
    assert len([line for line in lines if line.startswith(("| 1 |", "| 2 |"))]) == 2
    assert any(line.startswith("step-time ratio full/LoRA") for line in lines)
    data = json.loads(json_path.read_text())
    assert 0 < data["trainable"] < data["total"] and data["share"] == data["trainable"] / data["total"]
    assert len(data["rounds"]) == 2 and data["ratio"] > 0
