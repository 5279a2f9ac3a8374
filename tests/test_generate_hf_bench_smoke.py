"""Smoke test of benchmarks/generate_hf.py: it runs and prints its full table.

Timings are not tests: this checks that the script works end to end (``--quick``: a tiny Llama
shape, a few tokens, two paired rounds), that attnkit's greedy tokens equal transformers' (and that
the script fails when they do not), never that the speed goal is met.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from bench_helpers import run_quick

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "generate_hf.py"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    return run_quick("generate_hf.py", json_path, timeout=180), json_path


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_hf_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_every_row_and_goal(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    for name in ("A attnkit", "H transformers", "A/H", "A wins / ties / H wins", "tokens A = H"):
        assert name in header
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith(("| 1 |", "| 8 |"))}
    assert set(rows) == {"1", "8"}
    for row in rows.values():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2].replace(",", "")) > 0 and float(cells[3].replace(",", "")) > 0  # tokens/s
        assert cells[4].endswith("x") and float(cells[4][:-1]) > 0
        assert cells[5] == "2"  # paired rounds
        assert sum(int(n) for n in cells[6].split("/")) == 2  # each round is a win, a tie or a loss
        assert cells[7] == "yes"
    assert rows["8"].split("|")[2].strip() == "2..12"  # the batch of 8 has prompts of mixed lengths
    goal_rows = [line for line in lines if line.rstrip().endswith(("| PASS |", "| FAIL |"))]
    assert len(goal_rows) == 2
    assert "load average at start" in proc.stdout and "calibration" in proc.stdout and "goals pass" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and data["meta"]["model"]["num_key_value_heads"] == 2
    assert [r["batch"] for r in data["rows"]] == [1, 8]
    for r in data["rows"]:
        assert r["tokens_identical"] and len(r["ratios"]) == 2 and r["wins"] + r["ties"] + r["losses"] == 2
        assert r["median_ratio"] == pytest.approx(sum(r["ratios"]) / 2)
        assert [th / ta for ta, th in zip(r["times_s"]["A"], r["times_s"]["H"])] == pytest.approx(r["ratios"])


def test_different_tokens_fail_the_run(tmp_path: Path) -> None:
    proc = run_quick("generate_hf.py", tmp_path / "broken.json", "--batches", "1", "--break-parity", timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL: B=1: attnkit's new tokens" in proc.stderr
    assert not (tmp_path / "broken.json").exists()


def test_rounds_alternate_the_order(bench: ModuleType) -> None:
    calls: list[str] = []
    times = bench.time_paired({"A": lambda: calls.append("A"), "H": lambda: calls.append("H")}, 4)
    assert calls == ["A", "H", "H", "A", "A", "H", "H", "A"]
    assert len(times["A"]) == len(times["H"]) == 4


def test_verdict_has_a_tie_band(bench: ModuleType) -> None:
    assert [bench.verdict(r, 0.03) for r in (1.05, 1.02, 0.98, 0.96)] == ["win", "tie", "tie", "loss"]
