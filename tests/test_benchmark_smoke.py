"""Smoke test of benchmarks/encoder_block.py: it runs and prints its full table.

Timings are not tests: this checks that the script works end to end (``--quick``: tiny sizes,
a few reps), never that a speed goal is met.
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
    proc = run_quick("encoder_block.py", json_path, timeout=120)
    return proc, json_path


def test_quick_run_exits_zero(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, _ = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quick_run_prints_every_row(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out = quick_run[0].stdout
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("| config | mode |"))
    for name in ("A attnkit", "A' attnkit need_weights", "B tutorial explicit", "C torch TEL", "A/B", "A/C", "A'/B"):
        assert name in header

    # throughput: both configurations, every mode, causal inference on the long one
    rows = [line for line in lines if line.startswith("| B=")]
    expected = {("B=4 T=16", "train"), ("B=4 T=16", "infer"), ("B=2 T=64", "train"), ("B=2 T=64", "infer")}
    expected.add(("B=2 T=64", "causal infer"))
    found = {tuple(cell.strip() for cell in row.strip("|").split("|")[:2]) for row in rows}
    assert expected <= found
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if (cells[0], cells[1]) in expected:
            assert len(cells) == len(header.strip("|").split("|"))
            assert all(float(c.replace(",", "")) > 0 for c in cells[2:6])  # tokens/s of A, A', B, C

    # memory table: every implementation
    assert "## Memory of one training step" in out
    for name in ("A attnkit", "A' attnkit need_weights", "B tutorial explicit", "C torch TEL"):
        assert any(line.startswith(f"| {name} |") for line in lines)

    # goals table: every goal, each with a verdict (whatever it is)
    assert "| goal | measured | target | result |" in out
    goal_rows = [line for line in lines if line.rstrip().endswith(("| PASS |", "| FAIL |"))]
    assert len(goal_rows) == 3 + 4 + 5 + 1
    for needle in ("training: A / B", "inference: A / B", "causal inference: A / B", ": A / C", "A' / B", "memory"):
        assert any(needle in row for row in goal_rows), needle
    assert "goals pass" in out
    assert "load average at start" in out


def test_quick_run_writes_json(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True
    assert len(data["throughput"]) == 5
    assert set(data["memory"]) == {"A", "A'", "B", "C"}
    assert len(data["goals"]) == 13
    assert all(isinstance(g["passed"], bool) for g in data["goals"])
