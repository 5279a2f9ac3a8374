"""Real `attnkit tune` processes: two workers on one SQLite study, and a killed study resumed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState
from tune_helpers import SPACE_YAML, TINY_ARGS, cli, env, load

from attnkit.tuning import counts_toward_budget


@pytest.mark.slow
def test_two_workers_share_one_sqlite_study(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_YAML)
    db = tmp_path / "shared.db"
    proc = cli(
        "tune", "reverse", "--space", str(space), "--trials", "4", "--workers", "2", "--storage", str(db),
        "--study", "shared", f"output_dir={tmp_path}", *TINY_ARGS,
    )  # fmt: skip
    study = load(db, "shared")
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == 4  # the requested count between them, not 4 each
    run_dirs = [t.user_attrs["run_dir"] for t in counted]
    assert len(set(run_dirs)) == 4  # no trial ran twice
    for t in counted:
        assert Path(t.user_attrs["run_dir"]).name == f"trial-{t.number:04d}"
    # A trial a worker started over the budget (racing the other) never trained.
    for t in study.trials:
        if "skipped" in t.user_attrs:
            assert not (tmp_path / "tune" / "shared" / "trials" / f"trial-{t.number:04d}").exists()
    workers = {t.user_attrs["worker"] for t in counted}
    assert len(workers) == 2, f"both workers ran trials: {workers}"
    assert "[worker 1] trial" in proc.stdout and "[worker 2] trial" in proc.stdout
    assert "study shared: 4 trials" in proc.stdout
    assert (tmp_path / "tune" / "shared" / "best.yaml").is_file()


@pytest.mark.slow
def test_killed_tune_process_resumes_without_lost_or_repeated_trials(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_YAML)
    args = [
        "tune", "reverse", "--space", str(space), "--trials", "4", "--heartbeat", "1", f"output_dir={tmp_path}",
        *TINY_ARGS, "trainer.max_epochs=3",
    ]  # fmt: skip
    db = tmp_path / "tune" / "reverse" / "study.db"
    proc = subprocess.Popen([sys.executable, "-m", "attnkit.cli", *args], env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.time() + 240
    killed_number = None
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.3)
        if not db.is_file():
            continue
        try:
            trials = load(db, "reverse").trials
        except Exception:  # the study is being created
            continue
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        running = [t for t in trials if t.state == TrialState.RUNNING and t.intermediate_values]
        if done and running:  # killed mid-trial, after it reported its first epoch
            killed_number = running[0].number
            break
    assert proc.poll() is None, f"tune ended before it could be killed:\n{proc.stdout.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    before = {t.number: (t.value, t.params) for t in load(db, "reverse").trials if t.state == TrialState.COMPLETE}

    out = cli(*args).stdout  # the same command again resumes the study
    study = load(db, "reverse")
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == 4
    # The trials finished before the kill are kept as they were, and none was run again.
    assert {t.number: (t.value, t.params) for t in study.trials if t.number in before} == before
    assert not any(f"trial {n:>4}  complete" in out for n in before)
    killed = study.trials[killed_number]
    assert killed.state == TrialState.FAIL and not counts_toward_budget(killed)
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed_number]
    assert len(retry) == 1 and retry[0].params == killed.params and retry[0].state == TrialState.COMPLETE
    run_dirs = [t.user_attrs["run_dir"] for t in counted]
    assert len(set(run_dirs)) == len(run_dirs) and killed.user_attrs["run_dir"] not in run_dirs
    table = (tmp_path / "tune" / "reverse" / "trials.md").read_text()
    assert f"| {killed_number} | interrupted |" in table and f"re-run as trial {retry[0].number}" in table
