"""Smoke test of benchmarks/kv_cache.py: it runs and prints its full table.

Timings are not tests: this checks that the script works end to end (``--quick``: a tiny model, a
few tokens, one round), that the GPT-2 weight mapping reproduces Hugging Face's logits and greedy
tokens, never that a speed goal is met.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch

from bench_helpers import run_quick

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kv_cache.py"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    json_path = tmp_path_factory.mktemp("bench") / "results.json"
    proc = run_quick("kv_cache.py", json_path, timeout=180)
    return proc, json_path


def test_quick_run_prints_every_row_and_goal(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, json_path = quick_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    for name in ("A attnkit cached", "R attnkit recompute", "H HF GPT-2 generate", "A/R", "A/H", "tokens A = H"):
        assert name in header
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith(("| 1 |", "| 8 |"))}
    assert set(rows) == {"1", "8"}
    for row in rows.values():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(float(c.replace(",", "")) > 0 for c in cells[1:4])  # tokens/s of A, R, H
        assert cells[7] == "yes"  # greedy tokens identical to Hugging Face's
        assert float(cells[8]) < 1e-4  # logits agree
    goal_rows = [line for line in lines if line.rstrip().endswith(("| PASS |", "| FAIL |"))]
    assert len(goal_rows) == 7  # the mixed-length batch's goal, then 3 per batch size
    assert any(line.startswith("## Mixed-length batch: 8 prompts") for line in lines)
    assert "load average at start" in proc.stdout and "goals pass" in proc.stdout
    data = json.loads(json_path.read_text())
    assert data["meta"]["quick"] is True and len(data["rows"]) == 2
    assert all(p["tokens_identical_hf"] and p["tokens_identical_recompute"] for p in data["meta"]["parity"].values())
    assert data["mixed"]["tokens_identical_hf"] and data["mixed"]["tokens_identical_alone"]


def test_gpt2_weight_mapping_matches_hugging_face() -> None:
    spec = importlib.util.spec_from_file_location("kv_cache_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ours, hf = bench.build_models(vocab=50, d_model=32, layers=2, heads=4, context=40, seed=0)
    x = torch.randint(50, (2, 12))
    with torch.no_grad():
        assert (ours(x) - hf(x).logits).abs().max().item() < 1e-5
    assert ours.lm_head.weight is ours.token_embedding.weight
    prompt = torch.randint(50, (3, 5))
    with torch.inference_mode():
        assert torch.equal(bench.call("A", ours, hf, prompt, 20), bench.call("H", ours, hf, prompt, 20))
