"""``benchmarks/data_scale.py --format parquet`` (issue 38): the lm token cache built from a Parquet corpus
against the same documents as a ``.txt`` file. The smoke test runs ``--quick`` end to end (timings are not
tests); the others check that the script fails, not only prints, when a goal is missed."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench_helpers import BENCHMARKS, run_quick


def test_quick_parquet_run_builds_both_caches_alike(tmp_path: Path) -> None:
    proc = run_quick("data_scale.py", tmp_path / "out.json", "--format", "parquet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| text | Parquet file | .txt build | Parquet build |" in proc.stdout
    assert "NOTE: --quick" in proc.stdout
    rows = json.loads((tmp_path / "out.json").read_text())["parquet"]
    assert [r["size"] for r in rows] == [0.5, 1.0]
    for row in rows:
        assert row["same_cache"], row  # the same tokens, offsets and texts, from either file
        assert row["txt_mbs"] > 0 and row["parquet_mbs"] > 0 and len(row["ratios"]) == 1
        assert 0 < row["parquet_mb"] < row["text_mb"] and 0.1 < row["parquet_rss_gb"] < 1.2


@pytest.fixture()
def modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """``data_scale`` and ``data_scale_parquet``, imported from benchmarks/; the text corpus a few kB."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    data_scale = importlib.import_module("data_scale")
    parquet = importlib.import_module("data_scale_parquet")

    def make(path: Path, mb: float) -> int:
        path.write_text("".join(f"document {i} of {mb} MB.\n\n" for i in range(50)))
        return path.stat().st_size

    monkeypatch.setattr(data_scale, "make_corpus", make)
    return data_scale, parquet


GB = 10**9
CASES = {  # (parquet's seconds, its peak RSS at the larger size, whether its cache differs) -> the failure
    "all goals met": ((1.0, 0.55 * GB, False), None),
    "Parquet slower": ((2.5, 0.55 * GB, False), "0.02 MB: Parquet at x0.80 the MB/s of .txt (< 1.0)"),
    "memory grows": ((1.0, 0.75 * GB, False), "Parquet peak RSS grows 0.25 GB from 0.01 to 0.02 MB (> 0.15 GB)"),
    "caches differ": ((1.0, 0.55 * GB, True), "0.02 MB: the Parquet and .txt caches differ"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_script_fails_when_a_goal_is_missed(
    modules: tuple[ModuleType, ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    case: str,
) -> None:
    """.txt builds take 2 s, Parquet's as the case says (the median of two paired rounds); Parquet's peak RSS
    is 0.5 GB at the smaller size."""
    data_scale, parquet = modules
    (seconds, rss, differs), failure = CASES[case]

    def builds(jobs: list[dict]) -> list[dict]:
        out = []
        for job in jobs:
            mine = job["format"] == "parquet"
            large = job["size"] == 0.02
            out.append(
                {
                    **job,
                    "prepare_s": (seconds if mine and large else 1.0 if mine else 2.0),
                    "rss": (rss if large else 0.5 * GB) if mine else 0.45 * GB,
                    "workers_rss": 0,
                    "hashes": {"train.tokens": "b" if mine and large and differs else "a"},
                }
            )
        return out

    monkeypatch.setattr(parquet, "run_builds", builds)
    argv = ["data_scale.py", "--format", "parquet", "--sizes", "0.01", "0.02", "--rounds", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--workdir", str(tmp_path)])
    assert data_scale.main() == (0 if failure is None else 1)
    out = capsys.readouterr().out
    assert ("all checks passed" in out) == (failure is None)
    if failure is not None:
        assert f"CHECK FAILED: {failure}" in out
        assert "1 check(s) failed" in out
