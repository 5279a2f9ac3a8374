"""``attnkit`` commands that end early (a wrong input refused with exit 2, ``--print-config``) run in the test's
own process by click's test runner: the same entry point, exit code, standard output and standard error as
``python -m attnkit.cli`` in a subprocess, without the process start (about 5-10 s each: torch, Lightning).
:func:`cli_ok` runs the commands that read a run and print or write what it computes (``test``, ``predict``,
``generate``, ``translate``, ``export``) the same way, where a test's subject is what they compute; each of them
still runs as a real process somewhere (tests/training/test_runs.py, test_lm.py's and test_translate.py's `train`
runs, tests/test_sampling_entry_points.py). Commands that train, serve or must be a real process keep ``run_cli``
(tests/training/cli_helpers.py)."""

from __future__ import annotations

import subprocess

from click.testing import CliRunner

from attnkit.cli import main

__all__ = ["cli_in_process", "cli_ok"]


def cli_in_process(*args: str) -> subprocess.CompletedProcess:
    """``attnkit *args`` in this process, as a :class:`subprocess.CompletedProcess` (``returncode``, ``stdout``,
    ``stderr``); an exception the command does not turn into an exit code propagates (a test failure)."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return subprocess.CompletedProcess(["attnkit", *args], result.exit_code, result.stdout, result.stderr)


def cli_ok(*args: str) -> subprocess.CompletedProcess:
    """:func:`cli_in_process` that must succeed: an ``AssertionError`` with the command's output otherwise."""
    proc = cli_in_process(*args)
    assert proc.returncode == 0, f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc
