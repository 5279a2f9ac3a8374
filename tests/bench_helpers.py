"""Running a benchmark script's ``--quick`` smoke mode from a test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


def load_benchmark(script: str) -> ModuleType:
    """``benchmarks/<script>`` imported as a module (its functions tested in process)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_bench", BENCHMARKS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_cells(line: str) -> list[str]:
    """The cells of one row of a printed Markdown table."""
    return [c.strip() for c in line.strip().strip("|").split("|")]
