"""benchmarks/data_scale.py's memory figure (issue 21): the peak RSS of the measured process and of
every process it starts (the tokenizing workers) are summed, and the sum is checked against a bound:
the script fails, not only prints, when it is over."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench_helpers import BENCHMARKS

MB = 1 << 20

# Starts two workers that each touch 150 MB, then prints what the benchmark's child prints.
WORKERS = r"""
import json, multiprocessing, resource, time

def work():
    data = b"x" * (150 << 20)
    time.sleep(0.5)

if __name__ == "__main__":
    workers = [multiprocessing.get_context("fork").Process(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"import_s": 0, "prepare_s": 1, "setup_s": 0, "rss": rss, "workers_rss": largest}))
"""


@pytest.fixture()
def data_scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("data_scale", BENCHMARKS / "data_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_every_workers_peak_is_added_to_the_parents(data_scale: ModuleType, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(data_scale, "CHILD", WORKERS)
    out = data_scale.run_child(Path("unused"), Path("unused"), "char")
    assert out["processes"] == 3
    assert out["descendants_rss"] >= 2 * 150 * MB > out["workers_rss"]  # both workers, not the largest one
    assert out["total_rss"] == out["rss"] + out["descendants_rss"]
    assert out["total_private"] >= out["rss"] + 2 * 150 * MB  # what the workers wrote is theirs alone


@pytest.mark.parametrize(("private_gb", "fails"), [(2.6, True), (2.4, False)])
def test_the_script_fails_when_the_sum_is_over_the_bound(
    data_scale: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    private_gb: float,
    fails: bool,
):
    """Each process under its own bound (0.9 GB <= 1.2 GB), the three together over 2.5 GB or not (the
    check is on their memory without the pages they share; their plain RSS sum, 2.7 GB, is printed)."""
    gb = 10**9
    figures = {"import_s": 1.0, "prepare_s": 1.0, "setup_s": 0.5, "rss": 0.9 * gb, "workers_rss": 0.9 * gb}
    figures |= {"processes": 3, "descendants_rss": 1.8 * gb, "total_rss": 2.7 * gb, "total_private": private_gb * gb}
    monkeypatch.setattr(data_scale, "run_child", lambda *args: figures)
    monkeypatch.setattr(data_scale, "make_table", lambda path, millions: path.write_text("text,label\n") or 11)
    argv = ["data_scale.py", "--task", "classify", "--sizes", "0.001", "--rounds", "1", "--workdir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    assert data_scale.main() == (1 if fails else 0)
    out = capsys.readouterr().out
    assert f"all 3 process(es) together 2.70 GB (without the pages the workers share: {private_gb:.2f} GB)" in out
    assert ("the parent and its workers together 2.60 GB > 2.5 GB" in out) == fails
