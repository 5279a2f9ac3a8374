"""Smoke test of benchmarks/prefix_cache.py: it runs end to end (``--quick``: a tiny model, a 128-token shared
prefix, one round) and prints its table, with the tokens identical with and without the prefix cache and the
cache hit; never that a speed goal is met (timings are not tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_helpers import run_quick


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    return run_quick("prefix_cache.py", json_path, timeout=120), json_path


def test_quick_run_reuses_the_prefix_with_identical_tokens(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("| prefix + suffix | TTFT without cache (s) | TTFT with cache (s)") for line in lines)
    row = next(line for line in lines if line.startswith("| 128 + 8 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[5] == "1/1" and cells[7] == "yes"
    assert any(line.rstrip().endswith("| not checked (--quick) |") for line in lines)
    assert "load average at start" in proc.stdout and "load average at end" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and data["meta"]["prefix"] == 128 and len(data["rounds"]) == 1
    summary = data["summary"]
    assert summary["identical"] is True and summary["hits"] == 1 and summary["misses"] == 0
    assert summary["reused_tokens"] == 128  # the whole prefix, 8 blocks of 16 tokens
    (r,) = data["rounds"]
    assert r["ids_cache"] == r["ids_none"] and len(r["ids_cache"]) == 4


def test_no_cache_memory_fails_the_hit_check(tmp_path: Path) -> None:
    """With a cache that keeps nothing (``--cache-mb 0``) the requests are never served from it: exit status 1."""
    proc = run_quick("prefix_cache.py", tmp_path / "r.json", "--cache-mb", "0", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL: the prefix cache hit 0 of 1 requests" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["hits"] == 0
