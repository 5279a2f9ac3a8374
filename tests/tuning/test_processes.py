"""Real `attnkit tune` processes: two workers on one SQLite study, a killed study resumed, and two
"machines" sharing one study on a PostgreSQL server (one of them killed)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from tune_helpers import SPACE_YAML, TINY_ARGS, TuneProcess, cli, load, wait_until

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


def mid_trial(study: optuna.Study, pid: int | None = None) -> int | None:
    """The number of a trial that is running (of process ``pid``, if given) and has reported its first
    epoch, once that process has completed a trial; else None."""
    mine = [t for t in study.trials if pid is None or t.user_attrs.get("worker", "").endswith(f":{pid}")]
    done = [t for t in mine if t.state == TrialState.COMPLETE]
    running = [t for t in mine if t.state == TrialState.RUNNING and t.intermediate_values]
    return running[0].number if done and running else None


def check_killed_trial_was_rerun(study: optuna.Study, killed_number: int, before: dict, n_trials: int) -> None:
    """After a process was killed mid-trial and the study finished: exactly ``n_trials`` counted trials,
    those finished before the kill kept as they were, the killed one failed and re-run once with the
    same parameters, and no trial trained twice."""
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == n_trials
    assert {t.number: (t.value, t.params) for t in study.trials if t.number in before} == before
    killed = study.trials[killed_number]
    assert killed.state == TrialState.FAIL and not counts_toward_budget(killed)
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed_number]
    assert len(retry) == 1 and retry[0].params == killed.params and retry[0].state == TrialState.COMPLETE
    run_dirs = [t.user_attrs["run_dir"] for t in counted]
    assert len(set(run_dirs)) == len(run_dirs) and killed.user_attrs["run_dir"] not in run_dirs
    trained = [t for t in study.trials if "run_dir" in t.user_attrs]
    assert sorted(t.number for t in trained) == sorted([*(t.number for t in counted), killed_number])


# Bounded waits are generous: on a loaded shared machine importing attnkit alone can take minutes.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_killed_tune_process_resumes_without_lost_or_repeated_trials(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_YAML)
    args = [
        "tune", "reverse", "--space", str(space), "--trials", "4", "--heartbeat", "1", "--pruner", "none",
        f"output_dir={tmp_path}", *TINY_ARGS, "trainer.max_epochs=3",
    ]  # fmt: skip
    db = tmp_path / "tune" / "reverse" / "study.db"
    proc = TuneProcess(*args)
    proc.wait_for_line(r"^study reverse: ", timeout=600)  # printed once the storage and the study exist
    killed_number = wait_until(lambda: mid_trial(load(db, "reverse")), 600, "a trial ran mid-way", alive=proc)
    proc.kill()
    before = {t.number: (t.value, t.params) for t in load(db, "reverse").trials if t.state == TrialState.COMPLETE}

    out = cli(*args).stdout  # the same command again resumes the study
    study = load(db, "reverse")
    check_killed_trial_was_rerun(study, killed_number, before, 4)
    assert not any(f"trial {n:>4}  complete" in out for n in before)  # none was run again
    retry = next(t for t in study.trials if t.system_attrs.get("failed_trial") == killed_number)
    table = (tmp_path / "tune" / "reverse" / "trials.md").read_text()
    assert f"| {killed_number} | interrupted |" in table and f"re-run as trial {retry.number}" in table


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_machines_share_one_postgresql_study_and_survive_a_kill(tmp_path: Path, postgres_server):
    """Two separate `attnkit tune` commands (two "machines": own output folders and sampler seeds) share
    one study on a PostgreSQL server. Machine b creates it on an empty database and runs trials; it is
    frozen (SIGSTOP) mid-way through a trial, after finishing one; machine a joins the study while b's
    trial is still marked running, and b is then killed. Machine a finishes the study: exactly N trials,
    the killed trial re-run once, nothing finished lost, nothing trained twice.

    b has the study to itself until it is caught, so a cannot finish the study first; freezing b holds
    the caught state still while a starts (a race of both creating the storage at one moment is made
    to happen, and asserted, in test_storage.py's barrier test)."""
    url = postgres_server.create_database()  # postgresql://: attnkit picks the installed driver (psycopg 3)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_YAML)
    n = 4

    def machine(name: str, seed: int) -> TuneProcess:
        return TuneProcess(
            "tune", "reverse", "--space", str(space), "--trials", str(n), "--storage", url, "--study", "shared",
            "--heartbeat", "1", "--pruner", "none", "--sampler-seed", str(seed), f"output_dir={tmp_path / name}",
            *TINY_ARGS, "trainer.max_epochs=3",
        )  # fmt: skip

    b, a = machine("b", 2), None
    try:
        b.wait_for_line(r"^study shared: ", timeout=600)
        killed_number = wait_until(lambda: b.frozen_if(lambda: mid_trial(load(url, "shared"), b.proc.pid)), 600,
                                   "b ran a trial mid-way", b)  # fmt: skip
        a = machine("a", 1)
        try:
            a.wait_for_line(r"^study shared: ", timeout=600)  # a has joined the study b is running
        finally:
            b.kill()
        before = {t.number: (t.value, t.params) for t in load(url, "shared").trials if t.state == TrialState.COMPLETE}
        assert any(t.user_attrs["worker"].endswith(f":{b.proc.pid}") for t in load(url, "shared").trials
                   if t.number in before)  # fmt: skip

        out = a.finish(timeout=900)
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.kill()
    study = load(url, "shared")
    check_killed_trial_was_rerun(study, killed_number, before, n)
    assert f"study shared: {n} trials" in out
    trained = [d for m in ("a", "b") for d in (tmp_path / m / "tune" / "shared" / "trials").glob("trial-*")]
    assert len(trained) == n + 1  # the n counted trials and the killed one, each in one run folder
