"""The database of a study: URLs, drivers, and opening a storage that several processes may be creating.

A study's storage is an Optuna :class:`~optuna.storages.RDBStorage` (a SQLite file by default, or any
SQLAlchemy URL, e.g. PostgreSQL). ``attnkit tune`` creates or upgrades it once (:func:`prepare_storage`)
before any of its workers starts, and the workers open it without creating anything. Processes on
several machines may still open a storage that does not exist yet at the same moment: one of them
creates the tables and the others lose that race with a known error (a duplicate ``alembic_version``
row, a table or type that "already exists", a duplicate key in the catalogue); :func:`open_storage`
retries such an open a few times with backoff, and reports any other error at once. Each retry is
logged (logger ``attnkit.tuning.storage``, level INFO) and counted: :func:`lost_races`.
"""

from __future__ import annotations

import logging
import random
import re
import warnings
from importlib.util import find_spec
from pathlib import Path
from time import sleep
from typing import Any

import optuna

from attnkit.errors import ConfigError

__all__ = ["lost_races", "open_storage", "prepare_storage", "redact", "storage_url"]

log = logging.getLogger(__name__)

POSTGRES_HINT = "pip install 'attnkit[postgres]' (installs psycopg, the PostgreSQL driver)"
# An open that lost the race to create the tables: another process created them first.
_CREATION_RACE = re.compile(
    r"UNIQUE constraint failed: (alembic_version|version_info)|already exists|duplicate key value", re.IGNORECASE
)
RACE_RETRIES = 8
_lost = [0]  # opens of this process that lost the creation race and were retried


def lost_races() -> int:
    """How many times an open in this process lost the race to create a storage's tables and was
    retried by :func:`open_storage` (the retries made observable: a test asserts that its
    processes really collided)."""
    return _lost[0]


def redact(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def _postgres_driver(url: str) -> str:
    """``postgresql://`` (or ``postgres://``) names SQLAlchemy's default driver, psycopg2; where only
    psycopg 3 is installed, use that one. No driver at all is a :class:`ConfigError` saying what to install."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:
        return url  # open_storage says what is wrong with it
    if parsed.drivername not in ("postgresql", "postgres"):
        return url
    if find_spec("psycopg2") is not None:
        return parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    if find_spec("psycopg") is not None:
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    raise ConfigError(f"--storage {redact(url)}: no PostgreSQL driver is installed; {POSTGRES_HINT}")


def storage_url(storage: str | Path | None, study_dir: Path) -> str:
    """The SQLAlchemy URL: ``None`` -> ``<study folder>/study.db``; a plain path -> that SQLite file;
    ``postgresql://`` -> the installed PostgreSQL driver (psycopg2, else psycopg 3)."""
    if storage is None:
        return f"sqlite:///{(study_dir / 'study.db').resolve()}"
    storage = str(storage)
    if "://" not in storage:
        return f"sqlite:///{Path(storage).resolve()}"
    return _postgres_driver(storage)


def lost_creation_race(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says another process created the storage's
    tables at the same moment: worth opening again, unlike any other error."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, IntegrityError | OperationalError | ProgrammingError) and _CREATION_RACE.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _check_url(url: str) -> tuple[str, dict[str, Any]]:
    shown = redact(url)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception as err:
        raise ConfigError(
            f"--storage {shown!r} is not a database URL ({err}); "
            "write e.g. sqlite:///study.db, a file path, or postgresql://user:password@host/db"
        ) from None
    if parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).parent
        if not folder.is_dir():
            raise ConfigError(f"cannot open storage {shown}: folder {folder} does not exist")
    engine_kwargs: dict[str, Any] = (
        {"connect_args": {"timeout": 120}}  # several workers write to one SQLite file: wait for its lock
        if parsed.drivername.startswith("sqlite")
        else {"pool_pre_ping": True}
    )
    return shown, engine_kwargs


def open_storage(
    url: str, heartbeat: int = 10, *, create: bool = True, check_version: bool = True
) -> optuna.storages.RDBStorage:
    """Open an Optuna RDB storage whose running trials record a heartbeat every ``heartbeat`` seconds;
    a trial whose heartbeat is older than ``4 x heartbeat`` is marked failed and run again with the
    same parameters, up to twice (Optuna's :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`,
    ``max_retry=2``).

    ``create``: create the tables when they are missing (``False`` where :func:`prepare_storage` has
    made them). An open that lost the race to create them is retried (up to ``RACE_RETRIES`` times,
    with backoff); any other failure is a :class:`ConfigError` saying what was wrong.
    """
    shown, engine_kwargs = _check_url(url)
    for attempt in range(RACE_RETRIES + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    skip_compatibility_check=not check_version,
                    skip_table_creation=not create,
                    heartbeat_interval=heartbeat,
                    grace_period=4 * heartbeat,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2),
                )
        except ImportError as err:
            hint = POSTGRES_HINT if url.startswith("postgres") else "install the driver its URL names"
            raise ConfigError(
                f"cannot open storage {shown}: its database driver is not installed ({err}); {hint}"
            ) from None
        except Exception as err:
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            if attempt < RACE_RETRIES and lost_creation_race(err):
                _lost[0] += 1
                delay = min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5)
                log.info("storage %s: lost the race to create its tables (%s); open again in %.2f s", shown, msg, delay)
                sleep(delay)
                continue
            raise ConfigError(f"cannot open storage {shown}: {msg}") from None
    raise AssertionError("unreachable")


def prepare_storage(url: str, heartbeat: int = 10) -> tuple[optuna.storages.RDBStorage, str | None]:
    """Create the storage's tables, or upgrade a storage an older Optuna made, before any worker
    starts; returns the storage and a note when it was upgraded. A storage made by a newer Optuna is
    a :class:`ConfigError`."""
    storage = open_storage(url, heartbeat, create=True, check_version=False)
    current, head = storage.get_current_version(), storage.get_head_version()
    if current == head:
        return storage, None
    if current not in storage.get_all_versions():
        raise ConfigError(
            f"storage {redact(url)} was made by a newer Optuna (schema {current}, this one knows up to {head}); "
            "upgrade Optuna: pip install -U optuna"
        )
    storage.upgrade()
    return storage, f"upgraded storage {redact(url)} from Optuna schema {current} to {head}"
