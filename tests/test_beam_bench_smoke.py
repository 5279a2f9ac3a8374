"""Smoke test of benchmarks/beam_search.py: it runs and prints its tables.

Timings are not tests: this checks that the script works end to end (``--quick``: a tiny, barely
trained model and a few reps), never that the speed goal is met.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import run_quick


def test_quick_run_prints_tables_and_json(tmp_path: Path) -> None:
    json_path = tmp_path / "beam.json"
    proc = run_quick("beam_search.py", json_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "| batch | sentences | greedy ms/sentence | beam 4 ms/sentence | beam / greedy |" in out
    rows = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 64 |"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2]) > 0 and float(cells[3]) > 0 and cells[4].endswith("x")
    assert "beam 1 reproduces greedy: yes" in out
    assert "| greedy |" in out and "| beam 4 |" in out
    goal_rows = [line for line in out.splitlines() if line.rstrip().endswith(("| PASS |", "| FAIL |"))]
    assert len(goal_rows) == 2 and "goals pass" in out

    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True
    assert [r["batch"] for r in data["rows"]] == [1, 64]
    assert all(r["ms_per_sentence"]["beam"] > 0 and r["paired_ratio"] > 0 for r in data["rows"])
    assert data["quality"]["beam1_equals_greedy"] == 1.0
    assert len(data["goals"]) == 2
