"""Smoke test of benchmarks/training_overhead.py: it runs and prints its tables.

Timings are not tests: this checks that the script works end to end (``--quick``: a tiny data set,
two epochs of the real ``attnkit train`` code path and of the plain loop), never that the speed goal
is met.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_helpers import run_quick


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    proc = run_quick("training_overhead.py", json_path, timeout=60)
    return proc, json_path


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_quick_run_exits_zero(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, _ = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_quick_run_prints_the_table(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out = quick_run[0].stdout
    lines = out.splitlines()
    assert "| run | sequences/s | s / epoch | steps / epoch | A/B |" in lines
    for name in ("B plain PyTorch loop", "A attnkit train (Lightning)"):
        row = next(line for line in lines if line.startswith(f"| {name} |"))
        cells = _cells(row)
        assert len(cells) == 5
        assert float(cells[1].replace(",", "")) > 0  # sequences/s
        assert int(cells[3]) == 8  # 1024 sequences / 128 per batch

    header = next(line for line in lines if line.startswith("| epoch |"))
    epoch_rows = [line for line in lines if line.startswith(("| 1 ", "| 2 "))]
    assert len(epoch_rows) == 2
    for row in epoch_rows:
        cells = _cells(row)
        assert len(cells) == len(_cells(header))
        # same weights, data order and schedule: both runs reach the same training loss
        assert float(cells[7]) == pytest.approx(float(cells[8]), abs=1e-3)

    assert "initial weights of A and B identical: yes" in out
    assert "load average at start" in out and "load average at end" in out
    assert any(line.startswith("goal: A >= 0.85 x B") and line.endswith(("PASS", "FAIL")) for line in lines)


def test_quick_run_writes_json(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and data["meta"]["interleaved"] is True
    assert len(data["lightning"]["epochs"]) == len(data["plain"]["epochs"]) == 2
    assert data["ratio"] > 0 and isinstance(data["goal"]["passed"], bool)
