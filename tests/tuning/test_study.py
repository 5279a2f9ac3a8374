"""Real studies: trials are training runs; pruning, failures, results, reproduction and resumption."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from tune_helpers import SPACE_YAML, TINY, cli

import attnkit
from attnkit.errors import ConfigError
from attnkit.tuning import counts_toward_budget

SPACE = yaml.safe_load(SPACE_YAML) | {"model": {"d_model": [16, 24], "num_heads": [1, 2, 3]}}


@pytest.fixture(scope="module")
def study6(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path]:
    """6 trials of the reverse task (tiny data, 2 epochs), TPE and the median pruner. num_heads 3 does
    not divide d_model 16: such samples are rejected without training."""
    out = tmp_path_factory.mktemp("tune")
    study = attnkit.tune(
        "reverse", SPACE, n_trials=6, output_dir=str(out), startup_trials=2, **TINY, **{"model.num_layers": 1}
    )
    return study, out / "tune" / "reverse"


def test_six_trials_ran_as_training_runs(study6: tuple[optuna.Study, Path]):
    study, folder = study6
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == 6
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in counted)
    assert any(t.state == TrialState.COMPLETE for t in counted)
    for t in counted:
        run = Path(t.user_attrs["run_dir"])
        assert run == folder / "trials" / f"trial-{t.number:04d}"
        assert (run / "config.yaml").is_file()
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["optim"]["lr"] == t.params["optim.lr"] and cfg["model"]["d_model"] == t.params["model.d_model"]
        assert cfg["trainer"]["threads"] == 1 and cfg["trainer"]["progress_bar"] is False
        # The validation metric was reported after every epoch trained (2, or fewer when pruned).
        assert 1 <= len(t.intermediate_values) <= 2
        if t.state == TrialState.COMPLETE:
            assert len(t.intermediate_values) == 2 and (run / "metrics.json").is_file()
            assert t.value == json.loads((run / "metrics.json").read_text())["metrics"]["val/acc"]
        else:
            assert t.user_attrs["pruned"].startswith("stopped after epoch 1 by the pruner")
    for t in study.trials:
        if t.params["model.d_model"] % t.params["model.num_heads"]:  # never trained, recorded, not counted
            assert t.state == TrialState.PRUNED and "must divide d_model" in t.user_attrs["rejected"]
            assert "run_dir" not in t.user_attrs and not counts_toward_budget(t)


def test_results_files(study6: tuple[optuna.Study, Path]):
    study, folder = study6
    for name in ("best.yaml", "trials.csv", "trials.md", "history.png", "intermediate.png", "summary.json"):
        assert (folder / name).is_file(), name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["best"]["trial"] == study.best_trial.number and summary["best"]["value"] == study.best_value
    assert summary["trials_counted"] == 6
    table = (folder / "trials.md").read_text()
    assert table.startswith("| trial | state | val/acc | epochs | optim.lr | model.d_model | model.num_heads |")
    assert len([ln for ln in table.splitlines() if ln.startswith("| ") and ln[2].isdigit()]) == len(study.trials)
    report = (folder / "study_report.html").read_text()
    assert report.count("data:image/png;base64,") >= 2 and "Best trial" in report and "Search space" in report
    run_report = Path(summary["best"]["run_dir"]) / "report.html"
    assert run_report.is_file() and "Tuning study" in run_report.read_text()


def test_best_config_reproduces_with_attnkit_train(study6: tuple[optuna.Study, Path], tmp_path: Path):
    study, folder = study6
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["optim"]["lr"] == study.best_params["optim.lr"] and best["name"] is None
    cli("train", "reverse", "--config", str(folder / "best.yaml"), f"output_dir={tmp_path}", "name=repro")
    metrics = json.loads((tmp_path / "reverse" / "repro" / "metrics.json").read_text())["metrics"]
    assert metrics["val/acc"] == pytest.approx(study.best_value, abs=1e-6)


def test_resume_adds_only_the_missing_trials_and_checks_the_space(study6: tuple[optuna.Study, Path]):
    study, folder = study6
    before = {t.number: (t.state, t.value, t.params) for t in study.trials}
    out = str(folder.parent.parent)
    again = attnkit.tune(
        "reverse", SPACE, n_trials=7, output_dir=out, startup_trials=2, **TINY, **{"model.num_layers": 1}
    )
    assert sum(counts_toward_budget(t) for t in again.trials) == 7
    assert {t.number: (t.state, t.value, t.params) for t in again.trials if t.number in before} == before
    with pytest.raises(ConfigError, match="was started with another search space"):
        attnkit.tune("reverse", {"optim.lr": [1e-3]}, n_trials=8, output_dir=out, **TINY, **{"model.num_layers": 1})
    with pytest.raises(ConfigError, match=r"another base config \(model.num_layers: stored 1, now 2"):
        attnkit.tune("reverse", SPACE, n_trials=8, output_dir=out, **TINY, **{"model.num_layers": 2})


def test_failed_and_pruned_trials_are_recorded_and_the_study_goes_on(tmp_path: Path):
    # lr 1e30 makes the loss NaN within a few steps: a failed trial with the reason; the other trial completes.
    study = attnkit.tune(
        "reverse",
        {"optim.lr": [1e30, 3e-3]},
        n_trials=2,
        sampler=optuna.samplers.GridSampler({"optim.lr": [1e30, 3e-3]}, seed=0),
        pruner="none",
        output_dir=str(tmp_path),
        **TINY,
    )
    by_lr = {t.params["optim.lr"]: t for t in study.trials}
    assert by_lr[1e30].state == TrialState.FAIL and "training loss became nan" in by_lr[1e30].user_attrs["fail_reason"]
    assert by_lr[3e-3].state == TrialState.COMPLETE
    assert "failed" in (tmp_path / "tune" / "reverse" / "trials.md").read_text()

    # A pruner that always prunes: both trials stop after their first epoch; no best config to write.
    pruned = attnkit.tune(
        "reverse",
        {"optim.lr": {"low": 1e-3, "high": 1e-2}},
        n_trials=2,
        pruner=optuna.pruners.ThresholdPruner(upper=-1.0),
        study_name="pruned",
        output_dir=str(tmp_path),
        **TINY,
    )
    assert [t.state for t in pruned.trials] == [TrialState.PRUNED, TrialState.PRUNED]
    assert all(len(t.intermediate_values) == 1 for t in pruned.trials)
    assert not (tmp_path / "tune" / "pruned" / "best.yaml").exists()


def test_invalid_combinations_are_rejected_without_training(tmp_path: Path):
    db = tmp_path / "tune" / "reverse" / "study.db"
    db.parent.mkdir(parents=True)
    early = optuna.create_study(study_name="reverse", storage=f"sqlite:///{db}", direction="maximize")
    early.enqueue_trial({"model.d_model": 16, "model.num_heads": 3})  # the first trial: 3 does not divide 16
    study = attnkit.tune(
        "reverse",
        {"model.d_model": [16, 24], "model.num_heads": [1, 3]},
        n_trials=1,
        output_dir=str(tmp_path),
        **(TINY | {"trainer.max_epochs": 1}),
    )
    first = study.trials[0]
    assert first.state == TrialState.PRUNED and not first.intermediate_values
    assert "num_heads (3) must divide d_model (16)" in first.user_attrs["rejected"]
    assert not counts_toward_budget(first) and "run_dir" not in first.user_attrs
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == 1 and counted[0].state == TrialState.COMPLETE
    assert "| 0 | rejected |" in (tmp_path / "tune" / "reverse" / "trials.md").read_text()


def test_classify_study_and_its_best_config(tmp_path: Path):
    tiny_classify = {
        "data.synthetic_size": 240,
        "data.max_len": 24,
        "data.vocab_size": 300,
        "trainer.max_epochs": 1,
        "model.d_model": 16,
        "model.num_heads": 2,
        "model.num_layers": 1,
        "model.dim_feedforward": 32,
    }
    study = attnkit.tune(
        "classify",
        {"optim.lr": {"low": 1e-3, "high": 1e-2, "log": True}, "model.pooling": ["mean", "cls"]},
        n_trials=2,
        output_dir=str(tmp_path),
        **tiny_classify,
    )
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 2
    best = yaml.safe_load((tmp_path / "tune" / "classify" / "best.yaml").read_text())
    assert best["model"]["pooling"] == study.best_params["model.pooling"]
    result = attnkit.train("classify", best, name="best")
    assert result.metrics["val/acc"] == pytest.approx(study.best_value, abs=1e-6)
