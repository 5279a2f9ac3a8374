"""``attnkit tune`` with ``trainer.loggers=[mlflow]``: a 4-trial study in a real MLflow tracking server (the
session's, tests/mlflow_server.py), each trial's run nested under the study's run, read back through MLflow's
client."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState
from tune_helpers import SPACE_YAML, TINY

import attnkit
from mlflow_server import MlflowServer


class PruneTrial2(optuna.pruners.BasePruner):
    """Stops trial 2 at its first report (after epoch 1 of 2): a pruned trial, every time."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return trial.number == 2


def test_study_nested_in_mlflow(mlflow_tracking_server: MlflowServer, tmp_path: Path):
    from mlflow.tracking import MlflowClient

    study = attnkit.tune(
        "reverse",
        yaml.safe_load(SPACE_YAML),
        n_trials=4,
        study_name="nested",
        output_dir=str(tmp_path),
        pruner=PruneTrial2(),
        **{
            **TINY,
            "data.train_size": 600,  # 2 epochs (TINY's): a trial is pruned after its first, never after its last
            "model.num_layers": 1,
            "trainer.loggers": ["mlflow"],
            "trainer.mlflow_uri": mlflow_tracking_server.url,
            "trainer.mlflow_experiment": "tuning-test",
        },
    )
    client = MlflowClient(mlflow_tracking_server.url)
    experiment = client.get_experiment_by_name("tuning-test")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.run_id == study.user_attrs["mlflow_parent_run"]
    assert parent.info.run_name == "nested" and parent.info.status == "FINISHED"
    children = {r.data.tags["optuna.trial"]: r for r in runs if r is not parent}
    assert sorted(children) == ["0", "1", "2", "3"]
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED, TrialState.COMPLETE]
    pruned = children["2"]
    assert pruned.data.tags["mlflow.parentRunId"] == parent.info.run_id and pruned.info.status == "KILLED"
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]

    for trial in trials:
        run = children[str(trial.number)]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["attnkit.study"] == "nested"
        assert run.info.run_name == f"trial-{trial.number:04d}" and run.info.status == "FINISHED"
        # The trial's sampled keys among its parameters, its metrics and files.
        assert float(run.data.params["optim.lr"]) == trial.params["optim.lr"]
        assert run.data.params["model.d_model"] == str(trial.params["model.d_model"])
        assert run.data.metrics["val/acc"] == trial.value
        folder = Path(trial.user_attrs["run_dir"])
        assert json.loads((folder / "trackers.json").read_text())["mlflow"]["run_id"] == run.info.run_id
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.yaml", "metrics.json"}

    # The study's run: the best value and keys, the trial counts, the study's files.
    assert parent.data.metrics["best_value"] == study.best_value
    assert parent.data.metrics["best_trial"] == study.best_trial.number
    assert parent.data.metrics["trials_complete"] == 3 and parent.data.metrics["trials_pruned"] == 1
    assert parent.data.tags["best.optim.lr"] == str(study.best_params["optim.lr"])
    files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"study_report.html", "best.yaml", "trials.csv", "summary.json"} <= files
