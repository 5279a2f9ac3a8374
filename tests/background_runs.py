"""Long single-process runs (the README's figures, "it learns" runs of minutes) executed in the background, one
after another on one thread and at a lower priority, while the rest of the suite runs in the foreground: the
test machine's second core is otherwise idle for most of the suite (the docs build, tests/docs_build.py, is the
only other background work). A test names its run with ``@pytest.mark.background("name")``; tests/conftest.py
starts the runs of the selected tests once the suite is collected and moves those tests to the end, where each
waits for its run and asserts on what it wrote.

A run is declared once, at import of its test module, by :func:`declare`: one or more ``attnkit`` command lines,
executed in order until one fails (``{out}`` in an argument stands for the run's own temporary folder), and a
time limit for them all. Each process gets one thread and the suite's token cache folder, as ``run_cli`` gives
the processes that tests start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docs_build


@dataclass
class Run:
    name: str
    steps: list[list[str]]
    timeout: float
    folder: Path | None = None
    proc: subprocess.CompletedProcess[str] | None = None
    seconds: float = 0.0
    queued: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def result(self) -> tuple[Path, subprocess.CompletedProcess[str]]:
        """Wait for the run (starting the lane if nothing did) and give its folder and its process's outcome; an
        ``AssertionError`` with its output if it failed."""
        start([self.name])
        if not self.done.wait(timeout=_lane_timeout()):
            raise AssertionError(f"the background run {self.name!r} did not end in time")
        assert self.folder is not None and self.proc is not None
        if self.proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(map(str, self.proc.args))} failed ({self.proc.returncode}) after {self.seconds:.0f} s:\n"
                f"{self.proc.stdout}\n{self.proc.stderr}"
            )
        return self.folder, self.proc


_RUNS: dict[str, Run] = {}
_QUEUE: list[Run] = []
_LOCK = threading.Lock()
_LANE: threading.Thread | None = None
_STOPPING = threading.Event()
_CURRENT: subprocess.Popen[str] | None = None


def declare(name: str, *steps: list[str], timeout: float = 900) -> Run:
    """A background run of ``attnkit *args`` for each ``args`` of ``steps`` in order (``{out}`` in an argument: the
    run's folder), declared once; ``timeout``: seconds for all of them. A step ``["python", *args]`` runs this
    Python with ``args`` and tests/ on ``PYTHONPATH`` (a tests helper writing the files the commands read)."""
    if name in _RUNS:
        raise ValueError(f"the background run {name!r} is declared twice")
    if not steps or not all(steps):
        raise ValueError(f"the background run {name!r} needs at least one attnkit command line")
    _RUNS[name] = Run(name, [list(args) for args in steps], timeout)
    return _RUNS[name]


def _lane_timeout() -> float:
    return sum(run.timeout for run in _RUNS.values()) + docs_build.TIMEOUT


def _execute(run: Run) -> None:
    global _CURRENT
    run.folder = Path(tempfile.mkdtemp(prefix=f"attnkit-bg-{run.name}-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ATTNKIT_RUN_DIR", None)
    tests = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    helper_env = {**env, "PYTHONPATH": tests}
    begun = time.perf_counter()
    with open(run.folder / "stdout.txt", "w+") as out, open(run.folder / "stderr.txt", "w+") as err:
        for args in run.steps:
            argv = [a.replace("{out}", str(run.folder)) for a in args]
            helper = argv[0] == "python"  # a tests helper (files the commands read), run with tests/ on the path
            cmd = [sys.executable, *argv[1:]] if helper else [sys.executable, "-m", "attnkit.cli", *argv]
            if shutil.which("nice"):
                cmd = ["nice", "-n", "5", *cmd]  # the tests in the foreground come first
            with _LOCK:
                if _STOPPING.is_set():
                    return
                _CURRENT = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=helper_env if helper else env)
            try:
                code = _CURRENT.wait(timeout=max(1.0, run.timeout - (time.perf_counter() - begun)))
            except subprocess.TimeoutExpired:
                _CURRENT.kill()
                code = _CURRENT.wait()
                err.write(f"\nkilled: the run ran past its {run.timeout:.0f} s\n")
            if code != 0:
                break
        out.seek(0)
        err.seek(0)
        run.proc = subprocess.CompletedProcess(cmd, code, out.read(), err.read())
    run.seconds = time.perf_counter() - begun


def _lane() -> None:
    docs_build.wait()  # one background process at a time: the docs build first, where it runs
    while not _STOPPING.is_set():
        with _LOCK:
            if not _QUEUE:
                return
            run = _QUEUE.pop(0)
        try:
            _execute(run)
        finally:
            run.done.set()


def start(names: list[str]) -> None:
    """Queue the named runs (those not queued yet) and start the lane if it is not running."""
    global _LANE
    with _LOCK:
        for name in names:
            if name not in _RUNS:
                raise ValueError(f"no background run {name!r} is declared (background_runs.declare in its test module)")
            run = _RUNS[name]
            if not run.queued:
                run.queued = True
                _QUEUE.append(run)
        if _QUEUE and (_LANE is None or not _LANE.is_alive()):
            _LANE = threading.Thread(target=_lane, name="background-runs", daemon=True)
            _LANE.start()


def stop() -> None:
    """Kill a run still going (an interrupted session) and remove every run's folder."""
    _STOPPING.set()
    with _LOCK:
        _QUEUE.clear()
        if _CURRENT is not None and _CURRENT.poll() is None:
            _CURRENT.kill()
            _CURRENT.wait()
    if _LANE is not None:
        _LANE.join(timeout=30)
    for run in _RUNS.values():
        if run.folder is not None:
            shutil.rmtree(run.folder, ignore_errors=True)
