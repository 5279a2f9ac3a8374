"""Running a benchmark script's ``--quick`` smoke mode from a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_quick(script: str, json_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<script> --quick --json <json_path> <args>`` with one OpenMP thread (the
    test machine is shared); the finished process."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--json", str(json_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
