"""Inputs given as lines of a UTF-8 text file (or standard input), for prediction."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["numbered_inputs", "read_lines"]


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (``"-"``: standard input), without line ends; blank lines kept."""
    if str(path) != "-" and not Path(path).is_file():
        raise FileNotFoundError(f"input file {path} does not exist")
    data = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            lines.append(raw.decode("utf-8").removeprefix("\ufeff") if number == 1 else raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{path}:{number}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1})"
            ) from None
    return lines


def numbered_inputs(path: str | Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of every non-blank line of a UTF-8 text file (``"-"``: standard input)."""
    inputs = [(number, line) for number, line in enumerate(read_lines(path), start=1) if line.strip()]
    if not inputs:
        raise ValueError(f"{path}: no inputs (every line is blank)")
    return inputs
