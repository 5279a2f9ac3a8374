"""Packaging conventions: ``python -m attnkit`` is the command line, and the type hints ship (PEP 561)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

from attnkit.cli import main


def test_python_dash_m_runs_the_command_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: attnkit "), proc.stdout[:200]
    for command in main.commands:
        assert command in proc.stdout


def test_the_package_is_marked_typed() -> None:
    assert resources.files("attnkit").joinpath("py.typed").is_file()
