"""Skips are failures under CI.

A test that skips says why it cannot run here (no Chromium, no PostgreSQL server). On a developer's
machine that is fine; under CI (the ``CI`` environment variable, which ``.ci/run`` sets) every test
must run, so a skip there is reported as a failure that names its reason, and the run's closing
summary always prints the skip count. ``tests/conftest.py`` registers these hooks.
"""

from __future__ import annotations

import os

import pytest

ON_CI_MESSAGE = "skipped under CI, where every test must run (`make test` installs what the tests need)"


def on_ci() -> bool:
    """True under CI: the ``CI`` environment variable set to anything but ``""``, ``0`` or ``false``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.skipped and on_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{ON_CI_MESSAGE}: {reason}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = len(terminalreporter.stats.get("skipped", []))
    where = "under CI, where it must be 0" if on_ci() else "not under CI"
    terminalreporter.write_line(f"skipped tests: {skipped} ({where})")
