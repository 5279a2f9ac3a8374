"""Smoke test of benchmarks/gpu_suite.py (``--smoke``: tiny shapes, a few steps, no speed goals), so that the
GPU suite cannot rot between GPU runs: every section runs and fills its rows of the table and its keys of the
JSON with numbers; the parity check fails when the device copies are perturbed; without a GPU and without
``--smoke`` it refuses to run. Timings are not tests: no speed goal is checked here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import BENCHMARKS

SCRIPT = str(BENCHMARKS / "gpu_suite.py")
NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?x?$")


def run(*args: str, out: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    environ.pop("OUT", None)
    if out is not None:
        environ["OUT"] = str(out)
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300, env=environ)


def table(stdout: str) -> dict[tuple[str, str], tuple[str, str]]:
    """``(section, measurement) -> (value, verdict)`` of the printed table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] not in ("section", "---"):
            rows[cells[0], cells[1]] = (cells[2], cells[4])
    return rows


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path_factory.mktemp("gpu-suite")
    proc = run("--smoke", out=out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, json.loads((out / "gpu_suite.json").read_text())


def test_smoke_prints_every_section_s_rows_with_numbers(smoke: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    proc, _ = smoke
    assert "| section | measurement | value | goal | verdict |" in proc.stdout
    rows = table(proc.stdout)
    wanted = {
        "training": ["attnkit train lm: tokens/s", "plain eager loop (gpu_lm step): tokens/s", "attnkit / plain loop"],
        "sft": ["plain shuffled batches: real tokens/s", "length-grouped batches (default): real tokens/s",
                "packed, masked SDPA (no varlen in attnkit): real tokens/s", "packed / plain batches"],
        "serve": [f"{c} client(s): tokens/s" for c in (1, 8, 32)] + ["8 client(s): x one at a time",
                  "transformers generate, batch 1: tokens/s", "engine 1 client / transformers batch 1"],
        "parity": [f"{m} {d}" for m in ("imported Llama", "attnkit lm (gpt2 preset)") for d in ("fp32", "bf16")],
        "suite": ["wall time s"],
    }  # fmt: skip
    for section, names in wanted.items():
        for name in names:
            found = [
                (value, verdict) for (s, n), (value, verdict) in rows.items() if s == section and n.startswith(name)
            ]
            assert found, f"no row {section} / {name!r} in:\n{proc.stdout}"
            assert all(NUMBER.match(value) for value, _ in found), (section, name, found)
    verdicts = [verdict for (section, _), (_, verdict) in rows.items() if section == "parity" and verdict]
    assert len(verdicts) == 6 and set(verdicts) == {"PASS"}  # 4 logit comparisons, 2 greedy-token ones
    assert rows["training", "attnkit / plain loop"][1] == "not checked (smoke)"  # no speed goal in smoke mode
    assert rows["serve", "8 clients: tokens = one at a time (1 yes)"] == ("1", "PASS")
    assert "variable-length attention is not implemented in attnkit" in proc.stdout
    assert "suite passed" in proc.stdout


def test_smoke_writes_the_json_with_numbers(smoke: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, data = smoke
    assert data["smoke"] is True and data["card"] and data["date"] and "--smoke" in data["command"]
    assert data["passed"] is True and data["failures"] == []
    sections = data["sections"]
    training = sections["training"]
    assert training["attnkit"]["tokens_per_s"] > 0 and training["plain"]["tokens_per_s"] > 0 and training["ratio"] > 0
    assert training["plain"]["params"] > 0 and training["plain"]["flops_per_token"] > 0
    assert all(sections["sft"][kind]["real_tokens_per_s"] > 0 for kind in ("plain", "grouped", "packed"))
    assert sections["sft"]["packed_over_plain"] > 0 and sections["sft"]["varlen"] is False
    for clients in (1, 8, 32):
        served = sections["serve"][f"clients_{clients}"]
        assert served["tokens_per_s"] > 0 and served["x_sequential"] > 0 and served["identical"] is True
    assert sections["serve"]["transformers_batch1"]["tokens_per_s"] > 0
    parity = sections["parity"]
    assert len(parity) == 4 and all(0 <= p["ratio"] <= 1 for p in parity.values())
    assert [p["greedy_equal"] for name, p in parity.items() if name.endswith("fp32")] == [True, True]
    assert set(data["seconds"]) == {"training", "sft", "serve", "parity"} and data["total_seconds"] > 0
    assert all(isinstance(r["value"], float | int) for r in data["rows"] if r["section"] != "training")


@pytest.mark.parametrize(
    ("noise", "failing"),
    [("0.3", ["fp32 on", "fp32: greedy", "bf16 on"]), ("0.002", ["fp32 on"])],
    ids=["large-noise-fails-every-check", "small-noise-fails-fp32"],
)
def test_parity_fails_on_perturbed_device_copies(tmp_path: Path, noise: str, failing: list[str]) -> None:
    proc = run("--smoke", "--sections", "parity", "--perturb", noise, out=tmp_path)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = {n: v for (s, n), v in table(proc.stdout).items() if s == "parity" and v[1]}
    failed = {n for n, (_, verdict) in rows.items() if verdict == "CHECK FAILED"}
    for model in ("imported Llama", "attnkit lm (gpt2 preset)"):
        expected = {n for n in rows if n.startswith(model) and any(f"{model} {f}" in n for f in failing)}
        assert expected and expected <= failed, (model, failed)
    assert failed == {n for n in rows if any(f in n for f in failing)}  # the rest pass: the tolerances fit
    assert "suite FAILED" in proc.stdout
    data = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert data["passed"] is False and len(data["failures"]) == len(failed)


def test_refuses_to_run_without_a_gpu_unless_smoke() -> None:
    proc = run("--sections", "parity", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no CUDA GPU" in proc.stderr and "--smoke" in proc.stderr


def test_varlen_probe_fills_rows_exactly_and_refuses_without_cuda() -> None:
    """benchmarks/gpu_varlen_probe.py: each packed row's documents add up to the context; without CUDA it
    says so and exits 2 (its kernels run on CUDA only)."""
    sys.path.insert(0, str(BENCHMARKS))
    import gpu_varlen_probe

    rows = gpu_varlen_probe.lengths(16, 1024)
    assert len(rows) == 16 and all(sum(r) == 1024 and min(r) >= 1 for r in rows)
    assert sum(len(r) for r in rows) > 16  # several documents a row: packed
    if not __import__("torch").cuda.is_available():
        done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_varlen_probe.py")], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2 and "no CUDA GPU" in done.stderr
