"""StopWatchdog: a process whose handler does not answer a SIGTERM in time (its main thread stuck), or that does
not stop in time after answering it, is ended with 128 + signal and a message, the processes it started killed;
one that stops in time is left alone, and the interpreter gets its wakeup file back. Each case runs in a process
of its own (real signals, a real exit). test_fsdp_eval.py ends a real run stuck in a collective."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attnkit.training.watchdog import StopWatchdog

SCRIPT = """
import os, signal, socket, sys, time
from pathlib import Path
from attnkit.training.watchdog import StopWatchdog

mode, out = sys.argv[1], Path(sys.argv[2])
answered = []
# The run's own handler (Lightning's): it notes the signal, or (mode "stuck") never gets to run.
signal.signal(signal.SIGTERM, lambda signum, frame: mode != "stuck" and answered.append(signum))
signal.signal(signal.SIGUSR1, lambda signum, frame: None)
mine, _ = socket.socketpair()
mine.setblocking(False)
signal.set_wakeup_fd(mine.fileno())  # someone else's wakeup file, to be given back
watchdog = StopWatchdog(
    lambda: bool(answered),
    kill_children=lambda signum: out.with_suffix(".killed").write_text(str(signum)),
    hint=lambda: "HINT.",
    stuck_s=0.5,
    stop_s=1.0,
)
with watchdog:
    out.with_suffix(".ready").touch()
    start = time.monotonic()
    while time.monotonic() - start < (0.3 if mode == "stops" and answered else 30):
        time.sleep(0.01)  # the run, going on
        if mode == "stops" and answered and not out.with_suffix(".stopping").exists():
            out.with_suffix(".stopping").touch()
            start = time.monotonic()
        if mode == "other" and time.monotonic() - start > 2:
            break
print("wakeup file given back:", signal.set_wakeup_fd(-1) == mine.fileno())
print("ended by itself")
"""


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / mode
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not out.with_suffix(".ready").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the script did not start"
        time.sleep(0.01)
    return proc, out


@pytest.mark.parametrize(
    ("mode", "why", "least", "most"),
    [
        ("stuck", "its main thread did not answer it within 0.5 s: it is stuck", 0.5, 5.0),
        ("answers", "the run did not stop within 1 s of it: it is stuck", 1.0, 6.0),
    ],
)
def test_a_process_that_does_not_stop_in_time_is_ended(tmp_path: Path, mode: str, why: str, least: float, most: float):
    proc, out = _start(tmp_path, mode)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + signal.SIGTERM, (stdout, stderr)
    assert f"attnkit: SIGTERM received, but {why} (most likely waiting in a collective" in stderr
    assert f"ending process {proc.pid} and the processes it started, saving nothing. HINT." in stderr
    assert out.with_suffix(".killed").read_text() == str(int(signal.SIGKILL))  # its children: killed
    assert "ended by itself" not in stdout
    assert least <= took < most, took


def test_a_process_that_stops_in_time_is_left_alone(tmp_path: Path):
    proc, out = _start(tmp_path, "stops")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert out.with_suffix(".stopping").exists()  # it answered the signal, then took 0.3 s to stop
    assert stdout.splitlines() == ["wakeup file given back: True", "ended by itself"]
    assert not out.with_suffix(".killed").exists() and "attnkit:" not in stderr


def test_other_signals_are_not_its_business(tmp_path: Path):
    proc, _ = _start(tmp_path, "other")
    proc.send_signal(signal.SIGUSR1)  # has a Python handler too: written to the wakeup file as well
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert stdout.splitlines() == ["wakeup file given back: True", "ended by itself"]


def test_outside_the_main_thread_it_does_nothing():
    started: list[bool] = []
    watchdog = StopWatchdog(lambda: False)
    thread = threading.Thread(target=lambda: started.append(watchdog.start()))
    thread.start()
    thread.join()
    assert started == [False]
    watchdog.stop()  # nothing to stop


def test_one_watchdog_per_run_and_positive_times():
    watchdog = StopWatchdog(lambda: False)
    with watchdog, pytest.raises(RuntimeError, match="already watching: make one per run"):
        watchdog.start()
    for stuck_s, stop_s in ((0, 1), (1, 0), (-1, 1)):
        with pytest.raises(ValueError, match=f"stuck_s and stop_s must be > 0 seconds, got {stuck_s} and {stop_s}"):
            StopWatchdog(lambda: False, stuck_s=stuck_s, stop_s=stop_s)
