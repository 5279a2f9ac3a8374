"""Labelled texts in table files: ``.csv`` / ``.tsv`` (with a header row) and ``.jsonl``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from attnkit.io import decode_utf8

__all__ = ["SUPPORTED_TABLE_SUFFIXES", "read_column", "read_table"]

SUPPORTED_TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".tsv", ".jsonl")


def read_table(path: str | Path, text_column: str = "text", label_column: str = "label") -> tuple[list[str], list[Any]]:
    """Texts and raw labels (``str`` or ``int``, as in the file) of a ``.csv``/``.tsv``/``.jsonl`` file.

    csv/tsv need a header row; jsonl holds one JSON object per line (blank lines are skipped).
    Errors name the file and the line: malformed JSON, a missing column/key, an empty text or
    label, a label that is neither a string nor an integer, and a file without data rows.
    """
    path, suffix = _table_file(path)
    if suffix == ".jsonl":
        texts, labels = _read_jsonl(path, text_column, label_column)
    else:
        texts, labels = _read_delimited(path, text_column, label_column, "\t" if suffix == ".tsv" else ",")
    if not texts:
        raise ValueError(f"{path}: no data rows")
    return texts, labels


def _table_file(path: str | Path) -> tuple[Path, str]:
    """``(path, its lower-case suffix)`` of an existing table file; else a clear error."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_TABLE_SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {suffix!r}; supported: {', '.join(SUPPORTED_TABLE_SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    return path, suffix


def _open_text(path: Path, newline: str | None) -> io.StringIO:
    """The file's text (UTF-8; a leading byte order mark is dropped), read as ``open(path,
    newline=newline)`` would; bytes that are not UTF-8 are an error naming the line."""
    fix = f"save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}`"
    return io.StringIO(decode_utf8(path.read_bytes(), path, fix=fix), newline=newline)


def _check_row(path: Path, line: int, text: Any, label: Any, text_column: str, label_column: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"{path}:{line}: text in {text_column!r} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{path}:{line}: empty text in column {text_column!r}")
    if isinstance(label, bool) or not isinstance(label, str | int):
        raise ValueError(f"{path}:{line}: label in {label_column!r} must be a string or an integer, got {label!r}")
    if isinstance(label, str) and not label.strip():
        raise ValueError(f"{path}:{line}: empty label in column {label_column!r}")


def _read_delimited(path: Path, text_column: str, label_column: str, delimiter: str) -> tuple[list[str], list[Any]]:
    texts: list[str] = []
    labels: list[Any] = []
    with _open_text(path, newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        line = 1
        try:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}: empty file; a header row naming the columns is required")
            header = [h.strip() for h in header]
            for name in (text_column, label_column):
                if name not in header:
                    raise ValueError(f"{path}:1: no column {name!r} in the header; columns: {header}")
            ti, li = header.index(text_column), header.index(label_column)
            while True:
                line = reader.line_num + 1
                row = next(reader, None)
                if row is None:
                    break
                if not row:  # blank line
                    continue
                for name, i in ((text_column, ti), (label_column, li)):
                    if i >= len(row):
                        raise ValueError(
                            f"{path}:{line}: row has {len(row)} field(s), missing column {name!r}; columns: {header}"
                        )
                text, label = row[ti], row[li].strip()
                _check_row(path, line, text, label, text_column, label_column)
                texts.append(text)
                labels.append(label)
        except csv.Error as err:
            raise ValueError(f"{path}:{line}: malformed {path.suffix.lstrip('.')} row: {err}") from err
    return texts, labels


def _read_jsonl(path: Path, text_column: str, label_column: str) -> tuple[list[str], list[Any]]:
    texts: list[str] = []
    labels: list[Any] = []
    with _open_text(path, newline=None) as f:
        for line, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line}: malformed JSON: {err.msg} (column {err.colno})") from err
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{line}: expected a JSON object, got {type(obj).__name__}")
            for name in (text_column, label_column):
                if name not in obj:
                    raise ValueError(f"{path}:{line}: missing key {name!r}; keys present: {sorted(obj)}")
            text, label = obj[text_column], obj[label_column]
            if isinstance(label, str):
                label = label.strip()
            _check_row(path, line, text, label, text_column, label_column)
            texts.append(text)
            labels.append(label)
    return texts, labels


def read_column(path: str | Path, column: str) -> list[str]:
    """The values of one column (jsonl: key) of a ``.csv``/``.tsv``/``.jsonl`` file as strings, one
    per data row, in the rows :func:`read_table` reads (blank lines skipped). A missing column or
    an empty value is an error naming the file and line."""
    path, suffix = _table_file(path)
    values: list[str] = []
    with _open_text(path, newline="") as f:
        if suffix == ".jsonl":
            rows = ((line, json.loads(raw)) for line, raw in enumerate(f, start=1) if raw.strip())
        else:
            reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
            if reader.fieldnames is None or column not in [h.strip() for h in reader.fieldnames]:
                raise ValueError(f"{path}:1: no column {column!r} in the header; columns: {reader.fieldnames}")
            reader.fieldnames = [h.strip() for h in reader.fieldnames]
            rows = ((reader.line_num, row) for row in reader)
        try:
            for line, row in rows:
                value = row.get(column) if isinstance(row, dict) else None
                if value is None or not str(value).strip():
                    raise ValueError(f"{path}:{line}: no value in column {column!r}")
                values.append(str(value).strip())
        except (csv.Error, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: malformed row: {err}") from err
    if not values:
        raise ValueError(f"{path}: no data rows")
    return values
