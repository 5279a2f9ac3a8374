"""Smoke test of benchmarks/hooks_overhead.py: it runs end to end (``--quick``: a tiny Llama shape, two paired
rounds) and prints its table and JSON; a goal it misses fails the run; its reference really takes the hook points
out of the path. Never that the goal is met (timings are not tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from attnkit.nn.hooks import hooks
from bench_helpers import load_benchmark, run_quick, table_cells

STRIPPED = ["DecoderBlock.forward", "FeedForward.forward", "LanguageModel._hidden", "MultiHeadAttention.forward",
            "TransformerDecoder._run"]  # fmt: skip


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("hooks_overhead.py")


def test_quick_run_prints_the_table_and_json_and_fails_a_missed_goal(tmp_path: Path) -> None:
    # One run (the imports take most of its time): the full table and JSON, and a goal no timing can meet (A/R <=
    # 0.001) checked although --quick (given on the command line) and missed: the exit status is 1.
    proc: subprocess.CompletedProcess[str] = run_quick(
        "hooks_overhead.py", tmp_path / "out.json", "--goal", "0.001", timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| workload |"))
    for name in ("A ms per pass or token", "R ms per pass or token", "A/R (median of paired rounds)", "A/R wall clock",
                 "R wins / ties / A wins", "direct estimate", "A = R"):  # fmt: skip
        assert name in header
    rows = [
        table_cells(line)
        for line in lines
        if line.startswith(("| forward: ", "| generate: ")) and " A / R " not in line
    ]
    assert [r[0].split(":")[0] for r in rows] == ["forward", "generate"]
    for r in rows:
        assert float(r[1]) > 0 and float(r[2]) > 0 and r[3].endswith("x") and float(r[3][:-1]) > 0
        assert r[4].endswith("x") and float(r[4][:-1]) > 0
        assert r[5] == "2" and sum(int(n) for n in r[6].split("/")) == 2 and r[8] == "yes"
    goal_rows = [table_cells(line) for line in lines if line.startswith(("| forward: A / R", "| generate: A / R"))]
    assert [(r[2], r[3]) for r in goal_rows] == [("<= 0.00x", "FAIL")] * 2 and "0/2 goals pass" in proc.stdout
    assert "FAIL: goal missed: forward: A / R" in proc.stderr
    assert "load average at start" in proc.stdout and "calibration" in proc.stdout
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["meta"]["quick"] is True and data["meta"]["stripped_methods"] == STRIPPED
    assert data["meta"]["hook_points"] == 34  # 2 blocks of 16, the embeddings and the final norm
    for row in data["rows"]:
        assert len(row["ratios"]) == 2 and row["wins"] + row["ties"] + row["losses"] == 2
        assert row["median_ratio"] == pytest.approx(sum(row["ratios"]) / 2)
        assert [a / r for a, r in zip(row["times_s"]["A"], row["times_s"]["R"])] == pytest.approx(row["ratios"])
        walls = row["wall_times_s"]
        assert [a / r for a, r in zip(walls["A"], walls["R"])] == pytest.approx(row["wall_ratios"])
    assert [(g["checked"], g["passed"]) for g in data["goals"]] == [(True, False), (True, False)]


def test_quick_checks_only_a_goal_given(bench: ModuleType) -> None:
    assert (bench.parse_args(["--quick"]).check_goal, bench.parse_args(["--quick"]).goal) == (False, 1.03)
    assert (bench.parse_args(["--quick", "--goal", "2"]).check_goal, bench.parse_args(["--goal", "2"]).goal) == (
        True,
        2,
    )
    assert bench.parse_args([]).check_goal is True and bench.parse_args([]).rounds == 8
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "5"])  # at least 6 paired rounds


def test_the_reference_takes_every_hook_point_out_of_the_path(bench: ModuleType) -> None:
    model = bench.build_model(bench.TINY, 0)
    methods = bench.stripped_methods(model)
    assert sorted({f"{type(m).__name__}.{n}" for m, n, _ in methods}) == STRIPPED
    ids = torch.randint(3, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain, plain_tokens = model(ids), model.generate(ids[:1], 4, temperature=0.0, stop_at_eos=False)
        seen: list[str] = []

        def shift(x: torch.Tensor, hook: object) -> torch.Tensor:
            seen.append(getattr(hook, "name", ""))
            return x + 1.0

        with hooks(model, {"*": shift}):  # every hook point changes its activation
            hooked = model(ids)
            assert len(seen) > 30 and not torch.allclose(hooked, plain)
            seen.clear()
            with bench.hooks_taken_out(methods):
                reference = model(ids)
                generated = model.generate(ids[:1], 4, temperature=0.0, stop_at_eos=False)
            assert seen == [] and torch.equal(reference, plain)  # no hook point reached, the same computation
            assert torch.equal(generated, plain_tokens)
    assert not any(name in vars(module) for module, name, _ in methods)  # the copies are gone after the block
    assert torch.equal(model(ids).detach(), plain)


def test_rounds_alternate_the_order_and_keep_the_fastest(bench: ModuleType) -> None:
    calls: list[str] = []
    cpu, wall = bench.time_paired({"A": lambda: calls.append("A"), "R": lambda: calls.append("R")}, 2, 2)
    assert calls == ["A", "R", "R", "A", "R", "A", "A", "R"]
    assert len(cpu["A"]) == len(cpu["R"]) == len(wall["A"]) == len(wall["R"]) == 2
    assert [bench.verdict(r, 0.01) for r in (1.02, 1.005, 0.995, 0.98)] == ["win", "tie", "tie", "loss"]
