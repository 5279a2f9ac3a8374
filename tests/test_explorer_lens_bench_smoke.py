"""Smoke test of benchmarks/explorer_lens.py: ``--smoke`` (a tiny shape, 32 tokens, 6 paired rounds) runs end to end
through the explorer's ``/api/lens``, checks every view (cells, last row = the model's own top tokens), prints its
table, the load and the quiet check, and exits 1 on a missed goal (one given on the command line, unreachable here:
the smoke mode enforces none of its own; timings are not tests)."""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import run_quick, table_cells


def test_smoke_run_checks_every_view_and_exits_1_on_a_missed_goal(tmp_path: Path) -> None:
    json_path = tmp_path / "results.json"
    proc = run_quick("explorer_lens.py", json_path, "--goal", "0.01", timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("| tiny |")]
    cells = table_cells(row)
    assert float(cells[1]) > 0 and float(cells[3]) > 0 and cells[-1] == "FAIL (<= 0.01x)"
    assert "load average at start" in proc.stdout and "checks: pass" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["smoke"] is True and data["meta"]["length"] == 32
    [r] = data["rows"]
    assert len(r["view_ms"]) == len(r["forward_ms"]) == len(r["ratios"]) == 6 and r["problems"] == []
    assert r["p95_ratio"] > 0.01 and r["goal"] == 0.01 and r["met"] is False
