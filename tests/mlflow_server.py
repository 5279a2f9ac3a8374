"""A real MLflow tracking server for the tracker tests: ``mlflow server`` with a SQLite backend and a local
artifact root in a temporary folder, on 127.0.0.1 and a free port. The session fixture
``mlflow_tracking_server`` (this module is a plugin of ``tests/conftest.py``) shares one server between the
test modules that use it (each logs to experiments of its own) and stops it when the session ends. When the
collected tests use it, the server is started as soon as collection ends (:func:`pytest_collection_finish`), so
its start (10-30 s: the SQLite database's migrations) overlaps the tests that run before it; the fixture waits
until it answers.

Nothing leaves the machine: the server listens on the loopback interface only, and the runs it records are
read back through MLflow's own client.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

READY_TIMEOUT_S = 180.0  # a busy 2-core machine migrates the new SQLite database in 10-30 s


@dataclass
class MlflowServer:
    url: str
    folder: Path
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _launch(folder: Path) -> tuple[subprocess.Popen, MlflowServer]:
    """Start ``mlflow server`` in ``folder`` (its own process group); returns at once."""
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = folder / "server.log"
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
        "--default-artifact-root", str(folder / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    # No job executor (MLflow's background jobs for GenAI scorers): fewer processes to start and stop.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, MlflowServer(url=url, folder=folder, log=log)


def _wait_ready(proc: subprocess.Popen, server: MlflowServer) -> None:
    """Until ``/health`` answers; fails with the server's log if it exits or takes over READY_TIMEOUT_S."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(server.url):
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with code {proc.returncode}:\n{server.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            log = server.log.read_text()[-3000:]
            raise RuntimeError(f"mlflow server not ready after {READY_TIMEOUT_S:.0f} s:\n{log}")
        time.sleep(0.2)


@contextmanager
def mlflow_server(folder: Path) -> Iterator[MlflowServer]:
    """Start ``mlflow server`` in ``folder``; wait until ``/health`` answers (or fail with its log); stop it
    (its whole process group: the server and the workers it started) on the way out."""
    proc, server = _launch(folder)
    try:
        _wait_ready(proc, server)
        yield server
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its uvicorn workers too), SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # the whole group is gone
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:
            os.killpg(proc.pid, 0)  # a worker of the group still running?
        except ProcessLookupError:
            break
        time.sleep(0.5)


_EARLY: dict[str, tuple[subprocess.Popen, MlflowServer]] = {}  # the server started when collection ended


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server now when a collected test will use it (the fixture waits for it)."""
    if any("mlflow_tracking_server" in getattr(item, "fixturenames", ()) for item in session.items):
        _EARLY["server"] = _launch(Path(tempfile.mkdtemp(prefix="attnkit-mlflow-")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop an early server whose fixture never ran (a session stopped before it), and remove its folder."""
    if "server" in _EARLY:
        proc, server = _EARLY.pop("server")
        _stop(proc)
        shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    if "server" not in _EARLY:  # e.g. a test run by name from another plugin's collection: start it now
        with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as running:
            yield running
        return
    proc, server = _EARLY["server"]
    try:
        _wait_ready(proc, server)
        yield server
    finally:
        _EARLY.pop("server", None)
        _stop(proc)
        shutil.rmtree(server.folder, ignore_errors=True)
