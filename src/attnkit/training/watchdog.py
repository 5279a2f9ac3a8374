"""Ending a multi-process run that a signal cannot stop: a process stuck in a collective.

Lightning answers SIGTERM with a Python handler: it notes the signal, and the run stops at the end of
the batch (:class:`attnkit.training.preemption.PreemptionCheckpoint` saves ``last.ckpt`` there).
Python runs a handler only when the main thread runs Python code again. A process blocked in a
collective that another process never joins (an FSDP all-gather of a forward pass the others do not
make, a barrier) never does: the signal is noted by the interpreter and never acted on, and the run
hangs on, SIGTERM notwithstanding.

:class:`StopWatchdog` hears the signal in a thread of its own: :func:`signal.set_wakeup_fd` makes the
interpreter's C-level handler write the signal's number to a socket at once, whatever the main thread
is doing. When the run's own handler has not run within ``stuck_s`` seconds (the main thread is
blocked), or the run has not ended within ``stop_s`` seconds after it ran (it got stuck later, e.g.
in a collective with a process that has gone), the watchdog says so on stderr, kills the processes
this one started (Lightning's launcher: global rank 0 starts the others on its machine; they cannot
go on without it) and ends this process at once with exit code ``128 + signal`` (143 for SIGTERM),
saving nothing. A run that stops in time is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["STOP_S", "STUCK_S", "StopWatchdog"]

# Seconds a process gets, after a signal, to run its handler (a main thread not blocked in C code runs
# it within milliseconds) ...
STUCK_S = 10.0
# ... and, once it has, to stop by itself (finish its batch, save last.ckpt, end).
STOP_S = 60.0


class StopWatchdog:
    """Ends this process when a signal in ``signals`` did not stop it in time (see the module's docstring).

    ``handled()`` says whether the run's own handler has run since the signal (e.g. Lightning's
    ``trainer.received_sigterm``); ``kill_children(signum)`` kills the processes this one started;
    ``hint()`` is added to the message (e.g. where the last checkpoint is). Use it as a context manager
    around the run, from the main thread (elsewhere it does nothing: Python allows neither signal
    handlers nor a wakeup file there). While it runs, it holds the interpreter's wakeup file; the
    previous one is restored at the end.
    """

    def __init__(
        self,
        handled: Callable[[], bool],
        *,
        kill_children: Callable[[int], object] | None = None,
        hint: Callable[[], str] | None = None,
        stuck_s: float = STUCK_S,
        stop_s: float = STOP_S,
        signals: tuple[int, ...] = (int(signal.SIGTERM),),
    ) -> None:
        if not (stuck_s > 0 and stop_s > 0):
            raise ValueError(f"stuck_s and stop_s must be > 0 seconds, got {stuck_s} and {stop_s}")
        self.handled, self.kill_children, self.hint = handled, kill_children, hint
        self.stuck_s, self.stop_s, self.signals = stuck_s, stop_s, tuple(int(s) for s in signals)
        self._done = threading.Event()
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        self._previous = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StopWatchdog:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> bool:
        """Start watching; ``False`` (nothing done) outside the main thread."""
        if self._thread is not None:
            raise RuntimeError("this StopWatchdog is already watching: make one per run")
        if threading.current_thread() is not threading.main_thread():
            return False
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # the interpreter's handler must never block on it
        self._sockets = (reader, writer)
        self._previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="attnkit-stop-watchdog", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop watching (the run has ended) and give the interpreter its previous wakeup file back."""
        if self._thread is None or self._sockets is None:
            return
        signal.set_wakeup_fd(self._previous)
        self._done.set()
        reader, writer = self._sockets
        with contextlib.suppress(OSError):
            writer.send(b"\0")  # wakes the thread if it is still waiting for a signal
        self._thread.join(timeout=5)
        reader.close()
        writer.close()
        self._sockets = None

    def _watch(self) -> None:
        assert self._sockets is not None
        reader = self._sockets[0]
        signum = 0
        while not signum:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data or self._done.is_set():
                return
            signum = next((s for s in data if s in self.signals), 0)
        deadline = time.monotonic() + self.stuck_s
        while not self.handled():
            if self._done.wait(0.05):
                return
            if time.monotonic() > deadline:
                return self._end(signum, f"its main thread did not answer it within {self.stuck_s:g} s: it is stuck")
        if not self._done.wait(self.stop_s):
            self._end(signum, f"the run did not stop within {self.stop_s:g} s of it: it is stuck")

    def _end(self, signum: int, why: str) -> None:
        name = signal.Signals(signum).name
        message = (
            f"attnkit: {name} received, but {why} (most likely waiting in a collective for a process that "
            f"will never join it); ending process {os.getpid()} and the processes it started, saving nothing."
        )
        try:
            if self.hint is not None:
                message += f" {self.hint()}"
            if self.kill_children is not None:
                self.kill_children(int(signal.SIGKILL))
        finally:
            print(message, file=sys.stderr, flush=True)
            os._exit(128 + signum)
