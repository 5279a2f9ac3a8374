"""Smoke test of benchmarks/sft.py: it runs and prints its table (``--quick``: a tiny model, two paired rounds of
attnkit unpacked, packed and TRL's SFTTrainer). Timings are not tests: this never checks that packing is faster."""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import run_quick


def test_quick_run_prints_the_paired_rounds_and_writes_json(tmp_path: Path) -> None:
    json_path = tmp_path / "sft.json"
    proc = run_quick("sft.py", json_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert (
        "| round | A unpacked tok/s | A' random batches tok/s | B packed tok/s | R TRL tok/s | B/A' | B/A | A/R |"
        in lines
    )
    assert len([line for line in lines if line.startswith(("| 1 |", "| 2 |"))]) == 2
    assert any(line.startswith("packing: median") for line in lines)
    assert any(line.startswith("attnkit vs TRL: median") for line in lines)
    data = json.loads(json_path.read_text())
    assert len(data["rounds"]) == 2 and data["packing"] > 0 and data["attnkit_vs_trl"] > 0
    assert all(r[kind] > 0 for r in data["rounds"] for kind in ("unpacked", "random", "packed", "trl"))
