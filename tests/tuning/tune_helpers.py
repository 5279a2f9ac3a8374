"""Shared by the tuning tests: a tiny reverse setup and a subprocess runner for the real CLI."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import optuna
from sqlalchemy.pool import NullPool

T = TypeVar("T")

# Reverse on tiny data: a trial trains in about a second on an idle core.
TINY = {
    "data.train_size": 1200,
    "data.val_size": 96,
    "data.test_size": 96,
    "data.seq_len": 6,
    "trainer.max_epochs": 2,
    "trainer.batch_size": 32,
    "optim.warmup": 10,
}
TINY_ARGS = [f"{k}={v}" for k, v in TINY.items()]

SPACE_YAML = """\
optim.lr: {low: 2.0e-3, high: 2.0e-2, log: true}
model:
  d_model: [16, 32]
  num_heads: [1, 2]
"""


def env() -> dict[str, str]:
    out = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out.pop("ATTNKIT_RUN_DIR", None)
    return out


def cli(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the real `attnkit` entry point in a subprocess, one torch thread."""
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def load(db: Path | str, name: str) -> optuna.Study:
    """A study of an existing storage (a SQLite file or a URL); creates nothing, waits for SQLite's lock."""
    url = str(db) if "://" in str(db) else f"sqlite:///{db}"
    # NullPool: each query's connection is closed at once. A pooled one stays open until the engine is
    # collected, and a test polling a PostgreSQL study (wait_until) on a slow machine made enough of them to
    # reach the server's max_connections ("too many clients already"), failing the tune processes' commits.
    kwargs: dict[str, object] = {"poolclass": NullPool}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, skip_table_creation=True)
    return optuna.load_study(study_name=name, storage=storage)


class TuneProcess:
    """A real `attnkit` process whose output is read line by line in a thread, so that a test can wait
    (with a timeout) for a line it prints."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnkit.cli", *args], env=env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        """The first new line matching ``pattern``; fails if the process ends or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._new.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                code = self.proc.wait()
                raise AssertionError(f"the process ended ({code}) before printing {pattern!r}:\n{self.output}")
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n{self.output}")

    def frozen_if(self, check: Callable[[], T | None]) -> T | None:
        """Freeze the process (SIGSTOP), then ``check()``: if it found something, the process stays frozen
        in the state it saw (until :meth:`kill`); otherwise the process goes on (SIGCONT) and None is
        returned. The state is read while nothing can change it, so a poll cannot race the process."""
        if self.proc.poll() is not None:
            return None
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            result = check()
        except BaseException:
            os.kill(self.proc.pid, signal.SIGCONT)
            raise
        if result is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        return result

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=30)

    def finish(self, timeout: float) -> str:
        """Wait for the process to exit 0; its output."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        assert code == 0, f"attnkit exited with {code}:\n{self.output}"
        return self.output


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, alive: TuneProcess | None = None) -> T:
    """Poll ``condition`` until it returns something other than None; fails after ``timeout`` seconds,
    or as soon as the process ``alive`` has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result is not None:
            return result
        if alive is not None and alive.proc.poll() is not None:
            raise AssertionError(f"the process ended before {what}:\n{alive.output}")
        time.sleep(0.2)  # a polling interval: the condition, not the sleep, is what the test waits on
    raise AssertionError(f"not {what} within {timeout} s" + (f":\n{alive.output}" if alive else ""))


def race_opener(barrier, urls, results) -> None:
    """A process of the storage race test (started by ``multiprocessing``, spawn): for each URL it takes
    from ``urls`` (until ``None``), it waits at ``barrier`` with the other openers, then opens that
    storage and creates or loads the study ``s`` on it, and puts ``(retries, error)`` on ``results``:
    the creation races it lost and retried (:func:`attnkit.tuning.storage.lost_races`), and the error
    that stopped it, if any. The test's first URL is a storage that exists (no race): opening it
    does every import the driver needs, so that in the later rounds the openers leave the barrier
    together and collide."""
    from attnkit.tuning import storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for url in iter(urls.get, None):
        before = storage.lost_races()
        try:
            barrier.wait(timeout=600)  # the first round waits for every opener's imports
            store = storage.open_storage(url)
            optuna.create_study(study_name="s", storage=store, load_if_exists=True)
            store.engine.dispose()
        except Exception as err:  # reported to the test, which fails with it
            barrier.abort()
            results.put((storage.lost_races() - before, f"{type(err).__name__}: {err}"))
        else:
            results.put((storage.lost_races() - before, None))
