"""trainer.loggers: a tiny reverse run logged to a real MLflow tracking server (started by this module, on
127.0.0.1) and to W&B offline, read back through MLflow's client and from the W&B run folder; the errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import attnkit
from attnkit.cli import main
from attnkit.errors import ConfigError
from attnkit.tasks import build_config
from attnkit.training.trackers import check_trackers, mlflow_location
from mlflow_server import MlflowServer

TINY = {
    "data.train_size": 640,
    "data.val_size": 64,
    "data.test_size": 64,
    "data.seq_len": 6,
    "trainer.max_epochs": 1,
    "trainer.batch_size": 32,
    "trainer.log_every_n_steps": 5,
    "trainer.threads": 1,
    "trainer.progress_bar": False,
    "optim.warmup": 5,
}


@pytest.fixture(scope="module")
def tracked(
    mlflow_tracking_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """One run logged to csv, the MLflow server and W&B (offline: WANDB_MODE unset), with its report."""
    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "MLFLOW_TRACKING_URI"):
            mp.delenv(name, raising=False)
        result = attnkit.train(
            "reverse",
            output_dir=str(out),
            name="tracked",
            **TINY,
            **{
                "trainer.loggers": ["csv", "mlflow", "wandb"],
                "trainer.mlflow_uri": mlflow_tracking_server.url,
                "trainer.mlflow_experiment": "trackers-test",
            },
        )
    return result.run_dir, json.loads((result.run_dir / "trackers.json").read_text())


def test_run_in_mlflow_server(
    mlflow_tracking_server: MlflowServer, tracked: tuple[Path, dict[str, Any]], tmp_path: Path
):
    from mlflow.artifacts import download_artifacts
    from mlflow.tracking import MlflowClient

    server = mlflow_tracking_server
    run_dir, record = tracked
    assert record["mlflow"]["tracking_uri"] == server.url
    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name("trackers-test")
    (found,) = client.search_runs([experiment.experiment_id])
    run = client.get_run(record["mlflow"]["run_id"])
    assert found.info.run_id == run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name == "tracked"
    assert run.data.tags["attnkit.run_dir"] == str(run_dir.resolve())

    # The run's config as flat parameters (not the data's artifacts).
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    params = run.data.params
    assert params["task"] == "reverse" and params["model_family"] == "predictor"
    assert params["trainer.max_epochs"] == "1" and params["data.train_size"] == "640"
    assert params["model.d_model"] == str(config["model"]["d_model"]) and params["optim.lr"] == str(
        config["optim"]["lr"]
    )
    assert params["trainer.loggers"] == str(["csv", "mlflow", "wandb"])
    assert not any(key.startswith("artifacts") for key in params)

    # The metrics: the final ones equal metrics.json's; the training loss every 5 of the 20 steps.
    final = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    for key in ("val/acc", "val/loss", "test/acc", "test/loss"):
        assert run.data.metrics[key] == pytest.approx(final[key], rel=1e-6)
    history = client.get_metric_history(run.info.run_id, "train/loss_step")
    assert sorted(m.step for m in history) == [4, 9, 14, 19]

    # config.yaml, metrics.json and (written after training) report.html, as the run folder has them.
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.yaml", "metrics.json", "report.html"}
    for name in ("metrics.json", "report.html"):
        copy = download_artifacts(
            run_id=run.info.run_id, artifact_path=name, dst_path=str(tmp_path), tracking_uri=server.url
        )
        assert Path(copy).read_bytes() == (run_dir / name).read_bytes()


def test_wandb_offline_run_folder(tracked: tuple[Path, dict[str, Any]]):
    run_dir, record = tracked
    info = record["wandb"]
    assert info["mode"] == "offline" and info["project"] == "attnkit"
    # The training's offline run, and the same run id resumed for report.html (`wandb sync` joins them).
    folders = sorted((run_dir / "wandb").glob(f"offline-run-*-{info['run_id']}"))
    assert len(folders) == 2 and Path(info["files"]) == folders[0] / "files"
    train, report = folders
    assert (train / "files" / "config.yaml").read_bytes() == (run_dir / "config.yaml").read_bytes()
    assert (train / "files" / "metrics.json").read_bytes() == (run_dir / "metrics.json").read_bytes()
    assert (report / "files" / "report.html").read_bytes() == (run_dir / "report.html").read_bytes()
    # W&B's own log of the run holds its config (the run's keys) and its metrics.
    log = (train / f"run-{info['run_id']}.wandb").read_bytes()
    for key in (b"max_epochs", b"train_size", b"val/acc", b"test/loss", b"train/loss_step"):
        assert key in log, key


def test_unknown_logger_exits_2(tmp_path: Path):
    result = CliRunner().invoke(
        main, ["train", "reverse", "--output_dir", str(tmp_path), "trainer.loggers=[csv,neptune]"]
    )
    assert result.exit_code == 2, result.output
    assert "trainer.loggers.1" in result.output and "neptune" in result.output
    for name in ("tensorboard", "csv", "mlflow", "wandb"):
        assert f"'{name}'" in result.output
    assert not (tmp_path / "reverse").exists()


@pytest.mark.parametrize("package", ["mlflow", "wandb"])
def test_missing_package_names_the_extra(package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: importlib finds no spec
    with pytest.raises(ConfigError, match=rf"pip install 'attnkit\[{package}\]'"):
        attnkit.train("reverse", output_dir=str(tmp_path), **TINY, **{"trainer.loggers": ["csv", package]})
    assert not (tmp_path / "reverse").exists()  # refused before any data was read or folder made


def test_logger_choices():
    cfg = build_config("reverse")
    assert cfg.trainer.loggers == ["tensorboard", "csv"]
    with pytest.raises(ConfigError, match="csv named more than once"):
        build_config("reverse", overrides={"trainer.loggers": ["csv", "csv"]})
    with pytest.raises(ConfigError, match="at least one logger"):
        build_config("reverse", overrides={"trainer.loggers": []})


def test_mlflow_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri, artifacts = mlflow_location(None, tmp_path)
    assert uri == f"sqlite:///{tmp_path.resolve() / 'mlflow' / 'mlflow.db'}"
    assert artifacts == (tmp_path.resolve() / "mlflow" / "artifacts").as_uri()
    assert mlflow_location("http://127.0.0.1:5000", tmp_path) == ("http://127.0.0.1:5000", None)
    for remote in ("databricks", "databricks:my-profile", "databricks://my-profile", "file:/srv/mlruns"):
        assert mlflow_location(remote, tmp_path) == (remote, None)  # a tracking URI, not a folder to make
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert mlflow_location(None, tmp_path) == ("sqlite:///elsewhere.db", None)
    assert mlflow_location(str(tmp_path / "mine"), tmp_path)[0] == f"sqlite:///{tmp_path.resolve() / 'mine/mlflow.db'}"


def test_wandb_mode(monkeypatch: pytest.MonkeyPatch):
    cfg = build_config("reverse", overrides={"trainer.loggers": ["wandb"]})
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(
        ConfigError, match="WANDB_MODE='ofline' is not a W&B mode: set it to online, offline or disabled"
    ):
        check_trackers(cfg)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    check_trackers(cfg)
