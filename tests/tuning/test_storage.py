"""Opening a study's storage: the creation race between processes, PostgreSQL drivers, the GP sampler."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from tune_helpers import SPACE_YAML, TINY_ARGS, cli, env, load

from attnkit.errors import ConfigError
from attnkit.tuning import counts_toward_budget, storage
from attnkit.tuning.storage import lost_creation_race, open_storage, storage_url


def _db_error(cls: type, message: str) -> Exception:
    return cls("INSERT ...", {}, Exception(message))


@pytest.mark.parametrize(
    ("err", "race"),
    [
        (_db_error(IntegrityError, "UNIQUE constraint failed: alembic_version.version_num"), True),
        (_db_error(IntegrityError, "UNIQUE constraint failed: version_info.version_info_id"), True),
        (_db_error(OperationalError, "table studies already exists"), True),
        (_db_error(ProgrammingError, 'relation "studies" already exists'), True),
        (_db_error(IntegrityError, 'duplicate key value violates unique constraint "pg_type_typname_nsp_index"'), True),
        (_db_error(IntegrityError, "UNIQUE constraint failed: trials.number"), False),
        (_db_error(OperationalError, "unable to open database file"), False),
        (ValueError("table studies already exists"), False),  # not a database error
    ],
)
def test_only_errors_of_a_lost_creation_race_are_retried(err: Exception, race: bool):
    assert lost_creation_race(err) is race
    wrapped = RuntimeError("while creating")
    wrapped.__cause__ = err
    assert lost_creation_race(wrapped) is race


def test_open_retries_a_lost_race_with_backoff_and_reports_other_errors_at_once(monkeypatch, tmp_path: Path):
    calls: list[str] = []
    sleeps: list[float] = []
    errors = [_db_error(IntegrityError, "UNIQUE constraint failed: alembic_version.version_num")] * 2

    class FakeStorage:
        def __init__(self, url: str, **kwargs) -> None:
            calls.append(url)
            if errors:
                raise errors.pop(0)

    monkeypatch.setattr(optuna.storages, "RDBStorage", FakeStorage)
    monkeypatch.setattr(storage, "sleep", sleeps.append)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert isinstance(open_storage(url), FakeStorage)
    assert len(calls) == 3 and len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.5

    calls.clear()
    errors[:] = [_db_error(OperationalError, "disk I/O error")]
    with pytest.raises(ConfigError, match=r"cannot open storage sqlite:///.*a\.db: .*disk I/O error"):
        open_storage(url)
    assert len(calls) == 1  # not a race: no retry

    calls.clear()
    errors[:] = [_db_error(IntegrityError, "UNIQUE constraint failed: alembic_version.version_num")] * 100
    with pytest.raises(ConfigError, match="UNIQUE constraint failed"):
        open_storage(url)
    assert len(calls) == storage.RACE_RETRIES + 1  # bounded


OPENER = """
import sys, time
from pathlib import Path
from attnkit.tuning.storage import open_storage
folder, i = Path(sys.argv[1]), sys.argv[2]
(folder / f"ready-{i}").touch()
deadline = time.monotonic() + 600
while not (folder / "go").exists():
    assert time.monotonic() < deadline, "no go signal"
    time.sleep(0.005)
import optuna
optuna.create_study(study_name="s", storage=open_storage(sys.argv[3]), load_if_exists=True)
print("opened")
"""


def test_processes_creating_one_new_storage_at_the_same_moment_all_open_it(tmp_path: Path):
    """Four processes open a SQLite storage that does not exist yet, released together: the ones that
    lose the race to create its tables retry, and all of them open the same study."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    procs = [
        subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), str(i), url], env=env(), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(4)
    ]  # fmt: skip
    deadline = time.monotonic() + 600  # importing attnkit takes long on a loaded machine
    while len(list(tmp_path.glob("ready-*"))) < len(procs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "openers did not start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "opened", err[-2000:]
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s"]


def test_postgresql_urls_use_the_installed_driver(monkeypatch, tmp_path: Path):
    installed = {"psycopg"}
    monkeypatch.setattr(storage, "find_spec", lambda name: object() if name in installed else None)
    url = "postgresql://me:secret@db.example:5432/studies"
    assert storage_url(url, tmp_path) == "postgresql+psycopg://me:secret@db.example:5432/studies"
    assert storage_url("postgres://me@db/s", tmp_path) == "postgresql+psycopg://me@db/s"
    assert storage_url("postgresql+psycopg://me@db/s", tmp_path) == "postgresql+psycopg://me@db/s"  # as given
    installed.add("psycopg2")
    assert storage_url(url, tmp_path) == url
    installed.clear()
    with pytest.raises(ConfigError, match=r"no PostgreSQL driver is installed; pip install 'attnkit\[postgres\]'") as e:
        storage_url(url, tmp_path)
    assert "secret" not in str(e.value)
    assert storage_url("sqlite:///x.db", tmp_path) == "sqlite:///x.db"


@pytest.mark.slow
def test_gp_sampler_runs_a_small_study(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_YAML)
    out = cli(
        "tune", "reverse", "--space", str(space), "--trials", "4", "--sampler", "gp", "--pruner", "none",
        f"output_dir={tmp_path}", *TINY_ARGS, "trainer.max_epochs=1",
    ).stdout  # fmt: skip
    study = load(tmp_path / "tune" / "reverse" / "study.db", "reverse")
    counted = [t for t in study.trials if counts_toward_budget(t)]
    assert len(counted) == 4 and all(t.state == TrialState.COMPLETE for t in counted)
    assert "study reverse: 4 trials" in out
    # The first 3 (the start-up) are random; the 4th was proposed by the Gaussian process.
    modelled = [t.number for t in study.trials if any(k.startswith("gp:relative_params") for k in t.system_attrs)]
    assert modelled == [counted[3].number]
