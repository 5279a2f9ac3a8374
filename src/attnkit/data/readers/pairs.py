"""Tab-separated sentence-pair files (Tatoeba / Anki ``spa.txt``), optionally with a group column."""

from __future__ import annotations

import warnings
from pathlib import Path

__all__ = ["BUILTIN_SOURCE", "Pair", "read_pair_rows", "read_pairs"]

Pair = tuple[str, str]
BUILTIN_SOURCE = "numbers"


def read_pairs(path: str | Path, *, skip_bad_lines: bool = False) -> list[Pair]:
    """``(source, target)`` of every line of a tab-separated pairs file, in file order (see :func:`read_pair_rows`)."""
    return [(s, t) for s, t, _ in read_pair_rows(path, skip_bad_lines=skip_bad_lines)]


def read_pair_rows(
    path: str | Path, *, skip_bad_lines: bool = False, group_column: int | None = None
) -> list[tuple[str, str, str | None]]:
    """``(source, target, group)`` of every line of a tab-separated pairs file, in file order.

    ``group`` is column ``group_column`` (0-based) of the line, None without ``group_column``; a
    line without that column is a bad line.

    Columns after the second (Tatoeba's attribution) are ignored; both sides are stripped of
    surrounding whitespace. Blank lines are skipped. A line without a tab or with an empty side is
    an error naming the file and line, or, with ``skip_bad_lines``, skipped and counted in one
    warning. Bytes that are not UTF-8 are an error naming the file, line and column. A UTF-8 byte
    order mark at the start is ignored.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"pairs file {path} does not exist (data.source: a tab-separated file, or {BUILTIN_SOURCE!r})"
        )
    pairs: list[tuple[str, str, str | None]] = []
    bad: list[int] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}:{number}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                    "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            problem = None
            if len(parts) < 2:
                problem = "no tab: expected source<TAB>target"
            elif not parts[0].strip() or not parts[1].strip():
                problem = f"empty {'source' if not parts[0].strip() else 'target'}"
            elif group_column is not None and (len(parts) <= group_column or not parts[group_column].strip()):
                problem = f"no group in column {group_column} (data.group_column, 0-based)"
            if problem is not None:
                if not skip_bad_lines:
                    raise ValueError(
                        f"{path}:{number}: {problem}; got {line[:80]!r}. Fix the line, or set data.skip_bad_lines=true"
                    )
                bad.append(number)
                continue
            group = parts[group_column].strip() if group_column is not None else None
            pairs.append((parts[0].strip(), parts[1].strip(), group))
    if bad:
        warnings.warn(
            f"{path}: skipped {len(bad)} line(s) without a tab or with an empty side (first: line {bad[0]})",
            stacklevel=2,
        )
    if not pairs:
        raise ValueError(f"{path}: no sentence pairs (expected lines source<TAB>target)")
    return pairs
