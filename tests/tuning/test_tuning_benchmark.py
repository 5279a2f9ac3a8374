"""Smoke test of benchmarks/tuning.py --quick: it runs the three samplers and prints the side-by-side table.

Not a measurement (tiny data, one seed, three trials): it checks that the script works end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tune_helpers import env

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tuning.py"


def test_quick_benchmark_compares_tpe_gp_and_random(tmp_path: Path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, env=env(),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = (
        "| seed | random: best after 1 | TPE: best after 1 | GP: best after 1 | random: best after 3 "
        "| TPE: best after 3 | GP: best after 3 |"
    )
    assert header in lines
    row = next(line for line in lines if line.startswith("| 0 |"))
    assert row.count("%") == 6
    assert any(line.startswith("TPE found a better config than random search for") for line in lines)
    assert any(line.startswith("GP found a better config than random search for") for line in lines)
    data = json.loads(out.read_text())
    assert data["meta"]["quick"] is True
    studies = {s["sampler"]: s for s in data["studies"]}
    assert set(studies) == {"random", "tpe", "gp"}
    for s in studies.values():
        assert len(s["values"]) == 3 and 0.0 <= s["best"] <= 1.0
    # Same seed: the studies start from the same random trial.
    assert studies["random"]["params"][0] == studies["tpe"]["params"][0] == studies["gp"]["params"][0]
