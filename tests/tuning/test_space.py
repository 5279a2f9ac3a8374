"""Search spaces: reading, checking against a task's config, and bad input caught before any trial."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from tune_helpers import TINY

import attnkit
from attnkit.api import build_config
from attnkit.errors import ConfigError
from attnkit.tasks.classify import ClassifyConfig
from attnkit.tasks.reverse import ReverseConfig
from attnkit.tuning import load_space
from cli_inprocess import cli_in_process

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reverse_space.yaml"


def _base(task: str = "reverse") -> dict:
    return build_config(task).model_dump(mode="json")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_forms_are_read_into_distributions(tmp_path: Path):
    path = _write(
        tmp_path,
        "optim.lr: {low: 1e-4, high: 1e-2, log: true}\n"  # YAML 1.1 reads 1e-4 as a string: still a float
        "model:\n"
        "  num_layers: {low: 1, high: 3}\n"
        "  dim_feedforward: {low: 32, high: 128, step: 32}\n"
        "  dropout: {low: 0.0, high: 0.3}\n"
        "  d_model: [16, 32]\n"
        "trainer.batch_size: {choices: [32, 64]}\n",
    )
    space = load_space(path)
    by_key = {p.key: p for p in space.params}
    assert space.keys == [
        "optim.lr", "model.num_layers", "model.dim_feedforward", "model.dropout", "model.d_model", "trainer.batch_size",
    ]  # fmt: skip
    assert by_key["optim.lr"].kind == "float" and by_key["optim.lr"].log and by_key["optim.lr"].low == 1e-4
    assert by_key["model.num_layers"].kind == "int"
    assert by_key["model.dim_feedforward"].step == 32
    assert by_key["model.dropout"].kind == "float" and not by_key["model.dropout"].log
    assert by_key["model.d_model"].choices == (16, 32)
    assert by_key["trainer.batch_size"].kind == "categorical"
    assert space.check(ReverseConfig, _base(), "reverse") == []
    # The dict form (stored with a study) reads back to the same space.
    assert load_space(space.to_dict()).params == space.params

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        params = space.sample(study.ask())
        assert 1e-4 <= params["optim.lr"] <= 1e-2
        assert params["model.num_layers"] in (1, 2, 3) and params["model.dim_feedforward"] in (32, 64, 96, 128)
        assert params["model.d_model"] in (16, 32) and params["trainer.batch_size"] in (32, 64)


def test_example_space_checks_and_notes_the_heads_constraint():
    space = load_space(EXAMPLE)
    notes = space.check(ReverseConfig, _base(), "reverse")
    assert len(notes) == 1
    # Only the keys that interact are named: 3 of 4 x 4 (d_model, num_heads) pairs, whatever the dropout.
    assert notes[0].startswith("model.d_model and model.num_heads constrain each other: 3 of 16 combinations")
    assert "num_heads (3) must divide d_model (16)" in notes[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optim.lr: {low: 1e-3, high: 1e-2}\nmodel.d_modle: [16, 32]\n",
         "space.yaml:2: model.d_modle: unknown key of the reverse config; allowed keys here: activation, d_model"),
        ("optimm.lr: [0.1]\n", "space.yaml:1: optimm: unknown key of the reverse config; allowed keys here: data"),
        ("model:\n  dropout: {low: 0.1, high: 0.3}\n  pooling: [mean, cls]\n",
         "space.yaml:3: model.pooling: unknown key of the reverse config"),
        ("optim.lr: {low: 1e-2, high: 1e-4, log: true}\n", "optim.lr: empty range: low (0.01) must be below high"),
        ("model.num_layers: {low: 2, high: 2}\n", "empty range"),
        ("model.d_model: []\n", "space.yaml:1: model.d_model: empty list of choices"),
        ("optim.lr: 0.001\n", "is a single value, not something to search"),
        ("optim.lr: {low: 0.0, high: 0.1, log: true}\n", "a log range needs low > 0"),
        ("optim.lr: {low: 1e-4}\n", "a range needs both low and high"),
        ("optim.lr: {low: 1e-4, high: 1e-2, scale: log}\n", "unknown field(s) scale"),
        ("model.num_layers: {type: int, low: 1, high: 2.5}\n", "an int range needs int low, high and step"),
        ("output_dir: [a, b]\n", "output_dir cannot be searched"),
        ("model: [1, 2]\n", "model is a config section"),
        ("model.dropout: {low: 0.0, high: 1.0}\n", "model.dropout: high 1.0 is not valid: dropout must be in [0, 1)"),
        ("trainer.batch_size: [32, 0]\n", "trainer.batch_size: choice 0 is not valid"),
        ("data.seq_len: {low: 0, high: 8}\n", "data.seq_len: low 0 is not valid: Input should be greater than"),
        ("model.num_heads: [2, 3]\n", "model.num_heads: choice 3 is not valid: num_heads (3) must divide d_model (32)"),
        ("model.num_heads: [2, 3]\nmodel.d_model: [16, 32]\n",
         "model.num_heads: choice 3 is not valid with any value of model.d_model"),
        ("optim.lr: [0.1]\noptim.lr: [0.2]\n", "space.yaml:2: optim.lr is given twice"),
        ("", "is empty"),
    ],
)  # fmt: skip
def test_bad_spaces_are_clear_errors(tmp_path: Path, text: str, message: str):
    with pytest.raises(ConfigError) as info:
        load_space(_write(tmp_path, text)).check(ReverseConfig, _base(), "reverse")
    assert message in str(info.value)


def test_task_specific_keys_follow_the_task(tmp_path: Path):
    path = _write(tmp_path, "model.pooling: [mean, cls]\ndata.max_len: {low: 16, high: 64}\n")
    assert load_space(path).check(ClassifyConfig, _base("classify"), "classify") == []
    with pytest.raises(ConfigError, match=r"model\.pooling: unknown key of the reverse config"):
        load_space(path).check(ReverseConfig, _base(), "reverse")


def test_bad_input_fails_before_any_trial(tmp_path: Path):
    space = {"optim.lr": {"low": 1e-3, "high": 1e-2}}
    out = str(tmp_path / "runs")
    with pytest.raises(ConfigError, match="unknown key of the reverse config"):
        attnkit.tune("reverse", {"model.d_modle": [16]}, n_trials=2, output_dir=out)
    with pytest.raises(ConfigError, match=r"cannot open storage sqlite:////nonexistent-folder/x\.db: folder"):
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, storage="sqlite:////nonexistent-folder/x.db")
    with pytest.raises(
        ConfigError, match=r"psycopg2://user:\*\*\*@localhost/db: its database driver .*attnkit\[postgres"
    ):
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, storage="postgresql+psycopg2://user:pw@localhost/db")
    with pytest.raises(ConfigError, match=r"cannot open storage postgresql(\+psycopg)?://user:\*\*\*@127.0.0.1:1/db: "):
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, storage="postgresql://user:pw@127.0.0.1:1/db")
    with pytest.raises(ConfigError, match="cannot open storage nosuchdb://"):
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, storage="nosuchdb://x")
    with pytest.raises(ConfigError, match="--trials must be a positive integer"):
        attnkit.tune("reverse", space, n_trials=0, output_dir=out)
    with pytest.raises(ConfigError, match="unknown sampler 'grid'"):
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, sampler="grid")
    with pytest.raises(ConfigError, match=r"model\.d_modle: unknown key"):  # base config overrides are checked too
        attnkit.tune("reverse", space, n_trials=2, output_dir=out, **{"model.d_modle": 3})
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_timeout_before_the_first_trial_writes_empty_results(tmp_path: Path):
    study = attnkit.tune("reverse", {"optim.lr": [1e-3]}, n_trials=3, timeout=1e-6, output_dir=str(tmp_path), **TINY)
    assert study.trials == []
    folder = tmp_path / "tune" / "reverse"
    assert (folder / "study.db").is_file() and (folder / "study_report.html").is_file()
    assert not (folder / "best.yaml").exists()
    assert "No trial has completed yet" in (folder / "study_report.html").read_text()


def test_cli_reports_bad_input_with_exit_code_2(tmp_path: Path):
    space = _write(tmp_path, "optim.lr: {low: 1e-3, high: 1e-2}\nmodel.d_modle: [16, 32]\n")
    proc = cli_in_process("tune", "reverse", "--space", str(space), "--trials", "2", f"output_dir={tmp_path}")
    assert proc.returncode == 2
    assert f"error: {space}:2: model.d_modle: unknown key of the reverse config" in proc.stderr
    proc = cli_in_process(
        "tune", "reverse", "--space", str(EXAMPLE), "--trials", "2", "--storage", "sqlite:////no/such/folder/s.db",
        f"output_dir={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 2 and "cannot open storage sqlite:////no/such/folder/s.db" in proc.stderr
    assert not (tmp_path / "tune").exists()
