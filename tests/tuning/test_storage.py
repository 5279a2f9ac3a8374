"""Opening a study's storage: the creation race between processes, PostgreSQL drivers, the GP sampler."""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from tune_helpers import SPACE_YAML, TINY_ARGS, cli, load, race_opener

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


def test_open_retries_a_lost_race_with_backoff_and_reports_other_errors_at_once(monkeypatch, tmp_path: Path, caplog):
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
    before = storage.lost_races()
    with caplog.at_level(logging.INFO, logger="attnkit.tuning.storage"):
        assert isinstance(open_storage(url), FakeStorage)
    assert len(calls) == 3 and len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.5
    assert storage.lost_races() - before == 2  # each retry counted and logged
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        f"storage sqlite:///{tmp_path / 'a.db'}: lost the race to create its tables"
    ] * 2

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


OPENERS = 4  # processes that open each new storage together
MAX_ROUNDS = 12  # new storages tried until one of the openers lost the race and retried


@pytest.fixture(scope="module")
def openers() -> Iterator[Callable[[str], int]]:
    """Four processes (spawned, one thread each) kept for the module's race tests: ``open_together(url)``
    has each of them wait at one barrier and then open ``url`` and create or load its study ``s``
    (:func:`tune_helpers.race_opener`); it returns how many creation races they lost and retried
    between them, and fails with any error one of them met."""
    ctx = multiprocessing.get_context("spawn")
    barrier, urls, results = ctx.Barrier(OPENERS), ctx.Queue(), ctx.Queue()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")  # inherited by the spawned processes
        procs = [ctx.Process(target=race_opener, args=(barrier, urls, results), daemon=True) for _ in range(OPENERS)]
        for proc in procs:
            proc.start()

    def open_together(url: str) -> int:
        barrier.reset()  # no opener waits at it now; an earlier failure may have broken it
        for _ in procs:
            urls.put(url)
        outcomes = []
        deadline = time.monotonic() + 900  # importing attnkit takes long on a loaded machine
        while len(outcomes) < len(procs):
            try:
                outcomes.append(results.get(timeout=5))
            except queue.Empty:
                assert all(p.is_alive() for p in procs), "an opener died"
                assert time.monotonic() < deadline, "the openers did not finish"
        errors = [error for _, error in outcomes if error]
        assert not errors, errors
        return sum(retries for retries, _ in outcomes)

    yield open_together
    for _ in procs:
        urls.put(None)
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_processes_creating_one_new_storage_at_the_same_moment_all_open_it(
    backend: str, openers: Callable[[str], int], tmp_path: Path, request: pytest.FixtureRequest
):
    """Four processes, their imports done, wait at a barrier and open a storage that does not exist
    yet at the same moment: they collide creating its tables, the ones that lose retry, and all of
    them open the same study. New storages are tried until a retry has happened (nearly always the
    first; at most MAX_ROUNDS): a run where the processes never collided would show nothing."""
    if backend == "postgresql":
        new_url = request.getfixturevalue("postgres_server").create_database
    else:
        made = iter(range(MAX_ROUNDS + 1))
        new_url = lambda: f"sqlite:///{tmp_path / f'new-{next(made)}.db'}"  # noqa: E731
    warm = new_url()
    open_storage(warm).engine.dispose()
    assert openers(warm) == 0  # a storage that exists: no race, only the drivers' imports
    retries: list[int] = []  # per new storage, of all openers
    while sum(retries) == 0 and len(retries) < MAX_ROUNDS:
        url = new_url()
        retries.append(openers(url))
        assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s"]
    print(f"{backend}: retries per new storage {retries}")  # shown by pytest -rP
    assert sum(retries) > 0, f"no opener lost the race in {len(retries)} rounds: the processes did not collide"


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
