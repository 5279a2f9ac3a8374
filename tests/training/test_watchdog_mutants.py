"""StopWatchdog in this process: a real signal to the test process, its own handler (so the signal ends
nothing), ``os._exit`` stood in for (so the watchdog's end is recorded, not made). What each outcome
prints, how it ends, when, and what it leaves behind. Every wait is bounded (mutation testing's timeout
counts CPU seconds: a test that sleeps forever would never time out)."""

from __future__ import annotations

import io
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from attnkit.training.watchdog import STOP_S, STUCK_S, StopWatchdog


@dataclass
class Run:
    """A run in this process: its handler, the children it would kill, how the watchdog ended it."""

    answered: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    capsys: pytest.CaptureFixture[str] | None = None
    answer: bool = True  # whether the handler notes the signal (False: the main thread is "stuck")

    def handled(self) -> bool:
        return bool(self.answered)

    def stderr(self) -> str:
        assert self.capsys is not None
        return self.capsys.readouterr().err


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Run]:
    run = Run(capsys=capsys)

    def exit_(code: int) -> None:
        run.exits.append(code)
        run.ended.set()

    monkeypatch.setattr(os, "_exit", exit_)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    signal.signal(signal.SIGTERM, lambda signum, frame: run.answer and run.answered.append(signum))
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        yield run
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watchdog(run: Run, **kwargs: object) -> StopWatchdog:
    return StopWatchdog(run.handled, kill_children=run.killed.append, **kwargs)  # type: ignore[arg-type]


def _signal(signum: int) -> float:
    """Send ``signum`` to this process; its Python handler runs in this (the main) thread at once."""
    sent = time.monotonic()
    os.kill(os.getpid(), signum)
    time.sleep(0.01)  # the handler runs at the next bytecode
    return sent


def test_defaults_and_times() -> None:
    watchdog = StopWatchdog(lambda: False)
    assert (watchdog.stuck_s, watchdog.stop_s, watchdog.signals) == (STUCK_S, STOP_S, (int(signal.SIGTERM),))
    assert (STUCK_S, STOP_S) == (10.0, 60.0) and watchdog.kill_children is None and watchdog.hint is None
    other = StopWatchdog(lambda: True, stuck_s=0.5, stop_s=2, signals=(signal.SIGINT, signal.SIGUSR2))
    assert (other.stuck_s, other.stop_s, other.signals) == (0.5, 2, (2, int(signal.SIGUSR2)))
    assert all(type(s) is int for s in other.signals)
    StopWatchdog(lambda: False, stuck_s=1e-9, stop_s=1e-9)  # any time above 0


def test_it_holds_the_wakeup_file_in_a_daemon_thread_and_gives_both_back(run: Run) -> None:
    mine, theirs = socket.socketpair()
    mine.setblocking(False)
    previous = signal.set_wakeup_fd(mine.fileno())
    try:
        before = set(threading.enumerate())
        watchdog = _watchdog(run)
        assert watchdog.start() is True
        (thread,) = set(threading.enumerate()) - before
        assert thread.name == "attnkit-stop-watchdog" and thread.daemon and thread.is_alive()
        held = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(held)
        assert held not in (-1, mine.fileno())
        watchdog.stop()
        assert not thread.is_alive()  # ended by stop, not left waiting for a signal
        assert signal.set_wakeup_fd(-1) == mine.fileno()  # the previous one, given back
        signal.set_wakeup_fd(mine.fileno())
        with pytest.raises(OSError):
            os.fstat(held)  # its sockets are closed
        signal.set_wakeup_fd(-1)  # someone else's choice since
        watchdog.stop()  # a second stop does nothing: the wakeup file stays as it was
        assert signal.set_wakeup_fd(-1) == -1
    finally:
        signal.set_wakeup_fd(previous)
        mine.close()
        theirs.close()
    assert run.exits == [] and run.stderr() == ""


@pytest.mark.parametrize("hint", [None, "Resume with HINT."])
def test_a_signal_its_handler_does_not_answer_ends_the_process_after_stuck_s(run: Run, hint: str | None) -> None:
    run.answer = False
    watchdog = StopWatchdog(
        run.handled, kill_children=run.killed.append, hint=None if hint is None else lambda: hint, stuck_s=0.2
    )
    with watchdog:
        sent = _signal(signal.SIGTERM)
        assert run.ended.wait(10)
        took = time.monotonic() - sent
    assert run.exits == [128 + signal.SIGTERM] and run.killed == [int(signal.SIGKILL)]
    assert type(run.killed[0]) is int
    assert 0.2 <= took < 1.0, took  # it checks every 0.05 s
    message = (
        "attnkit: SIGTERM received, but its main thread did not answer it within 0.2 s: it is stuck (most likely "
        f"waiting in a collective for a process that will never join it); ending process {os.getpid()} and the "
        "processes it started, saving nothing." + ("" if hint is None else f" {hint}") + "\n"
    )
    assert run.stderr() == message


def test_a_run_that_answers_but_does_not_stop_is_ended_after_stop_s(run: Run) -> None:
    with _watchdog(run, stuck_s=5, stop_s=0.3):
        sent = _signal(signal.SIGTERM)
        assert run.answered == [signal.SIGTERM]
        assert run.ended.wait(10)
        took = time.monotonic() - sent
    assert run.exits == [143] and run.killed == [9]
    assert 0.3 <= took < 1.5, took
    stderr = run.stderr()
    assert stderr.startswith(
        "attnkit: SIGTERM received, but the run did not stop within 0.3 s of it: it is stuck (most likely"
    )
    assert stderr.endswith("saving nothing.\n")  # no hint


def test_a_run_that_stops_in_time_is_left_alone(run: Run) -> None:
    with _watchdog(run, stuck_s=0.2, stop_s=0.5):
        _signal(signal.SIGTERM)
        time.sleep(0.3)  # past stuck_s: answered, so it waits stop_s for the run to end
    assert not run.ended.wait(0.7)  # past stop_s too: stopped in time, nothing ended
    assert run.exits == [] and run.killed == [] and run.stderr() == ""


def test_a_handler_that_answers_within_stuck_s_is_waited_for(run: Run) -> None:
    """The handler's answer comes 0.15 s late (a main thread busy in C code, then back): within stuck_s."""
    run.answer = False
    with _watchdog(run, stuck_s=1.0, stop_s=5):
        _signal(signal.SIGTERM)
        time.sleep(0.15)
        run.answered.append(signal.SIGTERM)
        assert not run.ended.wait(1.2)  # past stuck_s: it saw the answer, and now waits stop_s
    assert run.exits == [] and run.stderr() == ""


def test_other_signals_are_not_its_business_but_a_watched_one_after_them_is(run: Run) -> None:
    run.answer = False
    with _watchdog(run, stuck_s=0.2, stop_s=0.2):
        _signal(signal.SIGUSR1)  # written to the wakeup file too
        assert not run.ended.wait(0.5)
        _signal(signal.SIGTERM)
        assert run.ended.wait(10)
    assert run.exits == [143]


def test_the_signal_it_ends_with_is_the_one_it_watched(run: Run) -> None:
    """Watching SIGUSR1 (its handler never marks it handled here): exit 128 + 10, SIGUSR1 named."""
    with _watchdog(run, stuck_s=0.1, signals=(signal.SIGUSR1,)):
        _signal(signal.SIGUSR1)
        assert run.ended.wait(10)
    assert run.exits == [128 + signal.SIGUSR1]
    assert run.stderr().startswith("attnkit: SIGUSR1 received, but its main thread did not answer it")


def test_without_children_to_kill_or_a_hint_it_still_ends(run: Run) -> None:
    run.answer = False
    with StopWatchdog(run.handled, stuck_s=0.1):
        _signal(signal.SIGTERM)
        assert run.ended.wait(10)
    assert run.exits == [143] and run.stderr().endswith("saving nothing.\n")


# The hint's error goes on up the watchdog's thread only because the stand-in for os._exit returns.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failing_hint_still_ends_the_process_with_its_message(run: Run) -> None:
    """A hint that raises (the run folder gone): the message is printed, the process ended, no child killed."""
    run.answer = False

    def hint() -> str:
        raise OSError("gone")

    with StopWatchdog(run.handled, kill_children=run.killed.append, hint=hint, stuck_s=0.1):
        _signal(signal.SIGTERM)
        assert run.ended.wait(10)
    assert run.exits == [143] and run.killed == []
    assert run.stderr().endswith("ending process " + str(os.getpid()) + " and the processes it started, "
                                          "saving nothing.\n")  # fmt: skip


def test_stop_before_any_signal_ends_its_thread_at_once(run: Run) -> None:
    watchdog = _watchdog(run)
    watchdog.start()
    started = time.monotonic()
    watchdog.stop()
    assert time.monotonic() - started < 1.0  # woken, not left to the join's 5 s


def test_a_second_start_is_refused_with_its_reason() -> None:
    watchdog = StopWatchdog(lambda: False)
    with watchdog, pytest.raises(RuntimeError, match=r"^this StopWatchdog is already watching: make one per run$"):
        watchdog.start()


def test_the_message_is_out_before_the_process_ends_whatever_stderr_is(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os._exit`` flushes nothing: the message must be flushed first, also to a block-buffered stderr (a
    file a logging setup put there), not only to the line-buffered one Python starts with."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="utf-8", line_buffering=False))
    out_at_exit: list[bytes] = []

    def exit_(code: int) -> None:
        out_at_exit.append(raw.getvalue())
        run.ended.set()

    monkeypatch.setattr(os, "_exit", exit_)
    run.answer = False
    with StopWatchdog(run.handled, stuck_s=0.1):
        _signal(signal.SIGTERM)
        assert run.ended.wait(10)
    (out,) = out_at_exit
    assert out.startswith(b"attnkit: SIGTERM received, but its main thread") and out.endswith(b"saving nothing.\n")


def test_signals_after_the_watched_one_fill_its_socket_quietly(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once it has its signal, the watchdog reads its socket no more; the signals that come after (a second
    SIGTERM, DataLoader workers' SIGCHLD) fill it after a few hundred. Python then drops their bytes without
    a word (a report "Exception ignored when trying to write to the signal wakeup fd" each is what it would
    say otherwise), and stop(), whose wake-up byte no longer fits, ends as usual."""
    reports: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)
    watchdog = _watchdog(run, stuck_s=5, stop_s=30)
    watchdog.start()
    try:
        _signal(signal.SIGTERM)  # answered: now the watchdog waits up to stop_s for the run to end
        for _ in range(3000):  # a 1-byte write takes about 770 bytes of a 208 KiB socket buffer (Linux)
            os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)  # a report is made by this thread, between two bytecodes
    finally:
        watchdog.stop()
    assert reports == [] and run.exits == [] and run.stderr() == ""


def test_stop_waits_5_s_at_most_for_a_watchdog_thread_that_does_not_end(run: Run) -> None:
    """A ``handled()`` that blocks (a lock the main thread holds while it ends the run): stop() gives the
    thread 5 s, then returns, so the run's end is never held longer (the thread is a daemon)."""
    release, asked = threading.Event(), threading.Event()

    def handled() -> bool:
        asked.set()
        release.wait(30)
        return True

    watchdog = StopWatchdog(handled, stuck_s=30, stop_s=30)
    watchdog.start()
    try:
        _signal(signal.SIGTERM)
        assert asked.wait(10)
        started = time.monotonic()
        watchdog.stop()
        took = time.monotonic() - started
    finally:
        release.set()
    assert 5.0 <= took < 5.8, took
    assert run.exits == []
