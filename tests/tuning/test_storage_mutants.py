"""Opening a study's storage: what its docstrings promise beyond the creation race (URLs, messages, the
heartbeat, creating and upgrading the tables), which mutation testing (tools/mutation.py) found the other
tests left open."""

from __future__ import annotations

import logging
import sqlite3
import warnings
from pathlib import Path

import optuna
import pytest
from sqlalchemy.exc import IntegrityError

from attnkit.errors import ConfigError
from attnkit.tuning import storage
from attnkit.tuning.storage import open_storage, prepare_storage, redact, storage_url


def _sqlite(path: Path) -> str:
    return f"sqlite:///{path}"


def test_storage_url_of_no_storage_and_of_a_plain_path_is_an_absolute_sqlite_file(monkeypatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    assert storage_url(None, Path("study")) == f"sqlite:///{tmp_path / 'study' / 'study.db'}"
    assert storage_url("runs/s.db", Path("study")) == f"sqlite:///{tmp_path / 'runs' / 's.db'}"
    assert storage_url(tmp_path / "p.db", Path("study")) == f"sqlite:///{tmp_path / 'p.db'}"


def test_redact_hides_the_password_also_of_a_url_it_cannot_parse():
    assert redact("postgresql://me:secret@db.example:5432/s") == "postgresql://me:***@db.example:5432/s"
    assert redact("postgresql://:secret@db/s") == "postgresql://:***@db/s"  # a password without a user
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    shown = redact("no url at all //me:secret@db/s")  # not a URL SQLAlchemy parses
    assert "secret" not in shown and shown == "no url at all //me:***@db/s"


def test_a_storage_that_is_not_a_url_or_in_a_missing_folder_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="is not a database URL") as err:
        open_storage("postgresql://me:secret@db:notaport/s")
    assert str(err.value).endswith(
        "; write e.g. sqlite:///study.db, a file path, or postgresql://user:password@host/db"
    )
    with pytest.raises(ConfigError, match=r"folder .*missing does not exist"):
        open_storage(_sqlite(tmp_path / "missing" / "s.db"))
    assert not (tmp_path / "missing").exists()
    open_storage("sqlite:///:memory:").engine.dispose()  # no folder to check


def test_a_bad_url_message_does_not_show_its_password():
    with pytest.raises(ConfigError) as err:
        open_storage("postgresql://me:secret@db:notaport/s")
    assert "secret" not in str(err.value)


def test_sqlite_waits_for_the_lock_of_workers_writing_at_once_and_servers_check_their_connections(
    monkeypatch, tmp_path: Path
):
    seen: list[dict] = []

    class FakeStorage:
        def __init__(self, url: str, **kwargs) -> None:
            seen.append(kwargs["engine_kwargs"])

    monkeypatch.setattr(optuna.storages, "RDBStorage", FakeStorage)
    open_storage(_sqlite(tmp_path / "s.db"))
    open_storage("postgresql+psycopg://me@db/s")
    assert seen == [{"connect_args": {"timeout": 120}}, {"pool_pre_ping": True}]
    open_storage("postgresql+psycopg://me@db/missing/s")  # a server's database name, not a local folder


def test_only_optunas_experimental_feature_warning_is_silenced(monkeypatch, tmp_path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_storage(_sqlite(tmp_path / "s.db")).engine.dispose()  # the heartbeat is an experimental feature

    class WarningStorage:
        def __init__(self, url: str, **kwargs) -> None:
            warnings.warn("pool size is small", UserWarning, stacklevel=1)

    monkeypatch.setattr(optuna.storages, "RDBStorage", WarningStorage)
    with pytest.warns(UserWarning, match="pool size is small"):
        open_storage(_sqlite(tmp_path / "s.db"))


def test_running_trials_record_a_heartbeat_and_a_stale_one_is_retried(tmp_path: Path):
    store = open_storage(_sqlite(tmp_path / "s.db"), heartbeat=7)
    try:
        assert store.heartbeat_interval == 7 and store.grace_period == 28  # older than 4 x heartbeat: stale
        assert isinstance(store.failed_trial_callback, optuna.storages.RetryHeartbeatStaleTrialCallback)
        assert open_storage(_sqlite(tmp_path / "s.db")).heartbeat_interval == 10  # the default
    finally:
        store.engine.dispose()


def test_create_false_does_not_make_missing_tables(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot open storage"):
        open_storage(_sqlite(tmp_path / "s.db"), create=False)
    open_storage(_sqlite(tmp_path / "t.db")).engine.dispose()  # made here
    open_storage(_sqlite(tmp_path / "t.db"), create=False).engine.dispose()  # opened


def _older_schema(path: Path) -> str:
    """A storage whose tables an older Optuna made (its recorded schema is the one before the newest)."""
    store, note = prepare_storage(_sqlite(path))
    assert note is None  # new: nothing to upgrade
    older = store.get_all_versions()[1]
    store.engine.dispose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (older,))
    return older


def test_prepare_storage_upgrades_a_storage_an_older_optuna_made(tmp_path: Path):
    older = _older_schema(tmp_path / "s.db")
    with pytest.raises(ConfigError, match="no longer compatible"):
        open_storage(_sqlite(tmp_path / "s.db"))  # a worker checks the version
    open_storage(_sqlite(tmp_path / "s.db"), check_version=False).engine.dispose()
    store, note = prepare_storage(_sqlite(tmp_path / "s.db"))
    head = store.get_head_version()
    assert note == f"upgraded storage {_sqlite(tmp_path / 's.db')} from Optuna schema {older} to {head}"
    assert store.get_current_version() == head
    store.engine.dispose()
    assert prepare_storage(_sqlite(tmp_path / "s.db"))[1] is None  # upgraded once


def test_prepare_storage_refuses_a_storage_a_newer_optuna_made(tmp_path: Path):
    path = tmp_path / "s.db"
    prepare_storage(_sqlite(path))[0].engine.dispose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = 'v99.0.0.a'")
    with pytest.raises(ConfigError, match=r"made by a newer Optuna \(schema v99\.0\.0\.a, ") as err:
        prepare_storage(_sqlite(path))
    assert str(err.value).endswith("; upgrade Optuna: pip install -U optuna")


def test_prepare_storage_opens_with_the_given_heartbeat(tmp_path: Path):
    for heartbeat, args in ((10, ()), (7, (7,))):  # open_storage's default, or the one given
        store = prepare_storage(_sqlite(tmp_path / "s.db"), *args)[0]
        assert (store.heartbeat_interval, store.grace_period) == (heartbeat, 4 * heartbeat)
        store.engine.dispose()


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("postgresql+psycopg://me:secret@db/s", storage.POSTGRES_HINT),
        ("mysql+pymysql://me:secret@db/s", "install the driver its URL names"),
    ],
)
def test_a_missing_database_driver_says_what_to_install(monkeypatch, url: str, hint: str):
    def missing(url: str, **kwargs) -> None:
        raise ImportError("No module named 'thedriver'")

    monkeypatch.setattr(optuna.storages, "RDBStorage", missing)
    with pytest.raises(ConfigError) as err:
        open_storage(url)
    message = str(err.value)
    assert message.startswith("cannot open storage ") and "driver is not installed (No module named" in message
    assert message.endswith(hint) and "secret" not in message


def test_an_error_is_reported_by_its_first_line_or_by_its_type(monkeypatch, tmp_path: Path):
    errors = [RuntimeError("first line\nsecond line"), RuntimeError()]

    def failing(url: str, **kwargs) -> None:
        raise errors.pop(0)

    monkeypatch.setattr(optuna.storages, "RDBStorage", failing)
    with pytest.raises(ConfigError) as err:
        open_storage(_sqlite(tmp_path / "s.db"))
    assert str(err.value).endswith(": first line")
    with pytest.raises(ConfigError) as err:
        open_storage(_sqlite(tmp_path / "s.db"))
    assert str(err.value).endswith(": RuntimeError")


def test_the_backoff_doubles_from_a_short_first_wait_up_to_a_cap_with_jitter(monkeypatch, tmp_path: Path, caplog):
    sleeps: list[float] = []

    def lose(url: str, **kwargs) -> None:
        raise IntegrityError("INSERT ...", {}, Exception("UNIQUE constraint failed: alembic_version.version_num"))

    monkeypatch.setattr(optuna.storages, "RDBStorage", lose)
    monkeypatch.setattr(storage, "sleep", sleeps.append)
    waits = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]  # seconds, before the random factor in [0.5, 1.5]
    assert len(waits) == storage.RACE_RETRIES
    for end in (min, max):  # the random factor at either end of its range
        sleeps.clear()
        monkeypatch.setattr(storage.random, "uniform", lambda low, high, end=end: end(low, high))
        with pytest.raises(ConfigError):
            open_storage(_sqlite(tmp_path / "s.db"))
        factor = 0.5 if end is min else 1.5
        assert sleeps == pytest.approx([factor * wait for wait in waits])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnkit.tuning.storage"), pytest.raises(ConfigError):
        open_storage(_sqlite(tmp_path / "s.db"))
    assert caplog.records[0].getMessage() == (
        f"storage {_sqlite(tmp_path / 's.db')}: lost the race to create its tables "
        "((builtins.Exception) UNIQUE constraint failed: alembic_version.version_num); open again in 0.08 s"
    )


def test_postgres_urls_name_sqlalchemys_postgresql_dialect_for_psycopg2(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(storage, "find_spec", lambda name: object())  # psycopg2 (and psycopg 3) installed
    assert storage_url("postgres://me:secret@db/s", tmp_path) == "postgresql://me:secret@db/s"
    assert storage_url("postgresql://me:secret@db/s", tmp_path) == "postgresql://me:secret@db/s"
