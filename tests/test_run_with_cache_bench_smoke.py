"""Smoke test of benchmarks/run_with_cache.py: it runs end to end (``--quick``: a tiny Llama shape, TransformerLens'
bridge over the same weights, two paired rounds) and prints its tables and JSON; a goal it misses fails the run; its
memory figures measure what a call holds. Never that the goals are met (timings are not tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from bench_helpers import load_benchmark, run_quick, table_cells

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("run_with_cache.py")


def test_quick_run_prints_the_tables_and_json_and_fails_a_missed_goal(tmp_path: Path) -> None:
    # One run (importing TransformerLens takes most of its time): the tables and JSON, and a time goal no timing can
    # meet (A/T <= 0.0001) checked although --quick (given on the command line): the exit status is 1.
    proc: subprocess.CompletedProcess[str] = run_quick(
        "run_with_cache.py", tmp_path / "out.json", "--time-goal", "0.0001", timeout=180
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        "| A attnkit | T TransformerLens | A/T (median of paired rounds) | rounds | A wins / ties / T wins | names |"
        in lines
    )
    timing = table_cells(lines[lines.index("|---:|---:|---:|---:|---|---:|") + 1])
    assert float(timing[0]) > 0 and float(timing[1]) > 0 and timing[2].endswith("x") and float(timing[2][:-1]) > 0
    assert timing[3] == "2" and sum(int(n) for n in timing[4].split("/")) == 2 and timing[5] == "16"
    memory = {
        table_cells(line)[0]: table_cells(line)
        for line in lines
        if line.startswith(("| model(ids)", "| run_with_cache,"))
    }
    assert list(memory) == ["model(ids), no hook", "run_with_cache, block 2 (16 names)",
                            "run_with_cache, every block (64 names)"]  # fmt: skip
    assert (
        0
        < float(memory["run_with_cache, block 2 (16 names)"][3])
        < float(memory["run_with_cache, every block (64 names)"][3])
    )  # MiB the caches hold
    goals = {table_cells(line)[0]: table_cells(line) for line in lines if line.startswith(("| time: ", "| memory: "))}
    assert goals["time: attnkit / TransformerLens run_with_cache"][2:] == ["<= 0.00x", "FAIL"]
    assert goals["memory: one block / every block (added by caching)"][2:] == ["<= 0.10", "not checked (--quick)"]
    assert "FAIL: goal missed: time: attnkit / TransformerLens" in proc.stderr and "memory:" not in proc.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    meta = data["meta"]
    assert meta["quick"] is True and meta["layer"] == 2 and len(meta["names"]) == 16 and meta["max_difference"] <= 1e-4
    assert {"blocks.2.hook_resid_pre", "blocks.2.attn.hook_pattern", "blocks.2.mlp.hook_post"} <= set(meta["names"])
    timed = data["time"]
    assert len(timed["ratios"]) == 2 and timed["wins"] + timed["ties"] + timed["losses"] == 2
    assert [a / t for a, t in zip(timed["times_s"]["A"], timed["times_s"]["T"])] == pytest.approx(timed["ratios"])
    held = data["memory"]["cache_bytes"]  # every block: 4 blocks' worth, less the residuals two blocks share
    assert 3 * held["one"] < held["every"] < 4 * held["one"]
    assert [(g["checked"], g["passed"]) for g in data["goals"]] == [(True, False), (False, False)]


def test_peak_memory_sees_what_a_call_holds(bench: ModuleType) -> None:
    def hold() -> torch.Tensor:
        return torch.ones(16 * MIB)  # 64 MiB, touched

    def transient() -> float:
        return float(torch.ones(16 * MIB).sum())  # 64 MiB, freed before the call returns

    for fn in (hold, transient):
        assert 60 * MIB <= bench.peak_added_bytes(fn) <= 80 * MIB, fn.__name__
    assert bench.peak_added_bytes(lambda: None) <= 8 * MIB


def test_cache_bytes_count_each_storage_once(bench: ModuleType) -> None:
    kv = torch.zeros(2, 10, 4)
    k, v = kv.unbind(0)  # two views of one storage
    assert bench.cache_bytes([k, v, kv.transpose(1, 2), torch.zeros(3)]) == 2 * 10 * 4 * 4 + 3 * 4


def test_goals_and_quick(bench: ModuleType) -> None:
    rows = bench.goal_results([("a", 0.5, 1.0), ("b", 1.5, 1.0), ("c", None, 1.0)], True)
    assert [(r["passed"], r["checked"]) for r in rows] == [(True, True), (False, True), (False, True)]
    quick = bench.parse_args(["--quick", "--memory-goal", "0.2"])
    assert quick.checked == {"time_goal": False, "memory_goal": True}
    assert (quick.time_goal, quick.memory_goal, quick.rounds) == (1.0, 0.2, 2)
    full = bench.parse_args([])
    assert full.checked == {"time_goal": True, "memory_goal": True} and (full.rounds, full.length) == (6, 128)
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "3"])  # at least 6 paired rounds
    calls: list[str] = []
    bench.time_paired({"A": lambda: calls.append("A"), "T": lambda: calls.append("T")}, 2, 1)
    assert calls == ["A", "T", "T", "A"]
    assert [bench.verdict(r, 0.03) for r in (0.9, 1.0, 1.1)] == ["win", "tie", "loss"]
