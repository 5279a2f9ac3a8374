"""Smoke test of benchmarks/memory.py: it runs (``--tiny``: a tiny decoder, one round of a DDP and an
FSDP run on 2 CPU processes), prints its table and ratios, writes its JSON and exits non-zero when
the goal is missed (here on purpose: ``--goal 0.01``; a tiny model's memory is the interpreter's).
Memory figures are not tested, only that both runs really had 2 processes and 2 steps each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench_helpers import BENCHMARKS

PHASES = ["imports and data", "model built", "fit start (sharded under fsdp)", "after step 1", "after step 2"]


def test_tiny_run_prints_the_table_and_fails_a_missed_goal(tmp_path: Path) -> None:
    json_path = tmp_path / "memory.json"
    args = ["--tiny", "--rounds", "1", "--configs", "ddp", "fsdp", "--seq-len", "32", "--goal", "0.01"]
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "memory.py"), *args, "--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]  # the goal was missed: a failing check
    lines = out.splitlines()
    assert (
        "| run | peak per process (MiB, median of rounds) | rank 0 | rank 1 | with checkpoint write, rank 0 | "
        "training s |" in lines
    )
    for name in ("ddp", "fsdp"):
        cells = next(line for line in lines if line.startswith(f"| {name} |")).strip("|").split("|")
        assert len(cells) == 6 and all(float(c.replace(",", "")) > 0 for c in cells[1:])
    assert any(line.startswith("fsdp / ddp peak per process: median ") for line in lines)
    assert "rounds within the goal: 0 of 1, above it: 1" in out
    assert "goal: FSDP <= 0.01 x DDP peak per process (median over rounds): FAIL" in lines
    assert "load average at start" in out and "load average at end" in out

    data = json.loads(json_path.read_text())
    assert data["passed"] is False and data["meta"]["tiny"] is True
    [round_] = data["rounds"]
    assert sorted(round_) == ["ddp", "fsdp"]
    for records in round_.values():
        assert [(r["world_size"], r["rank"], r["steps"]) for r in records] == [(2, 0, 2), (2, 1, 2)]
        for r in records:  # where the memory goes: resident now <= high-water mark, which never falls
            assert [name for name, _, _ in r["phases"]] == PHASES
            assert all(0 < rss <= peak for _, rss, peak in r["phases"])
            assert [peak for _, _, peak in r["phases"]] == sorted(peak for _, _, peak in r["phases"])
    assert "where the memory goes, rank 0 of round 1" in out
    ratio = data["checks"]["fsdp/ddp"]["median"]
    assert ratio == max(r["peak_mib"] for r in round_["fsdp"]) / max(r["peak_mib"] for r in round_["ddp"])
