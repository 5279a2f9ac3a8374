"""Smoke test of benchmarks/serve.py: it runs end to end (``--quick``: a tiny model, 8 short requests)
and prints its table, with every batched request's tokens identical to the sequential run's; never
that a speed goal is met (timings are not tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_helpers import run_quick


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    return run_quick("serve.py", json_path, timeout=180), json_path


def test_quick_run_prints_every_row_and_the_goal(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("| clients | tokens/s | TTFT p50") for line in lines)
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith(("| 1 |", "| 8 |", "| 32 |"))}
    assert set(rows) == {"1", "8", "32"}
    for row in rows.values():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1].replace(",", "")) > 0 and cells[7] == "yes"
    assert int(rows["8"].strip("|").split("|")[4]) > 1  # requests were decoded together
    assert any(line.rstrip().endswith(("| PASS |", "| FAIL |")) for line in lines)
    assert "load average at start" in proc.stdout and "goals pass" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and [r["clients"] for r in data["rows"]] == [1, 8, 32]
    assert all(r["identical"] for r in data["rows"])
