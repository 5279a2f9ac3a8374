"""Smoke test of benchmarks/stop_strings.py: it runs end to end (``--quick``: a tiny model, 16 vs 64 new tokens,
two rounds) and prints its table, with the same ids with and without stop strings (which never match); never
that the overhead is flat (timings are not tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_helpers import run_quick


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    return run_quick("stop_strings.py", json_path, timeout=120), json_path


def test_quick_run_prints_both_lengths_with_identical_ids(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("| new tokens | µs/token without stops | µs/token with stops") for line in lines)
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith(("| 16 |", "| 64 |"))}
    assert set(rows) == {"16", "64"}
    for row in rows.values():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1]) > 0 and float(cells[2]) > 0
    assert any(line.rstrip().endswith("| not checked (--quick) |") for line in lines)
    assert "load average at start" in proc.stdout and "ids identical with and without stop strings: True" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and data["identical"] is True
    assert [r["new_tokens"] for r in data["rows"]] == [16, 64]
    assert all(len(r["paired_overheads_us"]) == len(r["times_with_s"]) == 2 for r in data["rows"])  # per round
    assert isinstance(data["ratio"], float) and isinstance(data["paired_ratio"], float)


def test_a_matching_stop_string_fails_the_run(tmp_path: Path) -> None:
    """A stop string that occurs in the text ends rows early: the comparison is void, exit status 1."""
    proc = run_quick("stop_strings.py", tmp_path / "r.json", "--stops", "o", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stderr
