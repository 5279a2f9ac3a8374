"""Smoke test of benchmarks/explore.py: it runs end to end (``--quick``: tiny models, 6 rounds of 32 tokens) in
Chromium and prints its table, every update showing the typed input with a payload under 1 MB; never that
a speed goal is met (timings are not tests); the model view (every layer) is measured too."""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import run_quick


def test_quick_run_prints_both_models_and_the_goals(tmp_path: Path) -> None:
    json_path = tmp_path / "results.json"
    proc = run_quick("explore.py", json_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| lm-quick |", "| 135M-quick |"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[3]) > 0 and float(cells[5]) >= 0 and cells[-1] in ("PASS", "FAIL")
    assert "load average at start" in proc.stdout and "checks: pass" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and [r["model"] for r in data["rows"]] == ["lm-quick", "135M-quick"]
    for r in data["rows"]:
        assert len(r["update_ms"]) == len(r["forward_ms"]) == 6 and r["problems"] == []
        assert 0 < max(r["payload_bytes"]) <= 1_000_000
        assert len(r["model_view_ms"]) == 6 and 0 < max(r["model_view_bytes"]) <= 1_000_000
