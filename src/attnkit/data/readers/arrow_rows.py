"""Rows of Parquet and Arrow files, streamed record batch by record batch, with their columns checked.

PyArrow (the optional extra ``parquet``: ``pip install 'attnkit[parquet]'``) reads every format: Parquet
with :class:`pyarrow.parquet.ParquetFile` (its pages read 1 MB at a time, nothing kept once decoded), Arrow IPC files
(``.feather``, ``.arrow``) and IPC streams (what ``datasets``' ``save_to_disk`` writes) memory-mapped. Only
the columns asked for (and those of ``data.where``) are read, one batch of a few thousand rows at a time,
so a corpus larger than memory streams through. Every problem is a ``ValueError`` naming the file: a
missing column or one of the wrong type (the message lists the file's columns with their types and the
option to set), a file that is truncated or not Parquet/Arrow at all.

:class:`RowFilter` is what the data configs' ``where``, ``sample_fraction`` and ``max_rows`` ask for:
rows whose columns equal the given values, then a seeded share of them (the same rows on every run and
for any batch size), then the first ``max_rows``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "EXTRA",
    "Column",
    "RowBatch",
    "RowFilter",
    "RowPlaces",
    "file_columns",
    "iter_row_batches",
    "pyarrow",
    "read_rows",
]

EXTRA = "pip install 'attnkit[parquet]'"
BATCH_ROWS = 4096
BUFFER_BYTES = 1 << 20  # a Parquet column chunk is read this many bytes at a time
_KINDS = {"text": "a string", "label": "a string or an integer", "group": "a string or an integer", "any": "any"}


def pyarrow(*, compute: bool = False) -> ModuleType:
    """The ``pyarrow`` module (with ``ipc`` and ``parquet`` loaded, and ``compute`` when asked: importing it
    takes about half a second, and only ``data.where`` needs it); an ``ImportError`` naming the extra to
    install when it is missing."""
    try:  # imported by name: PyArrow ships no type hints, and is optional
        pa = importlib.import_module("pyarrow")
        for module in ("ipc", "parquet", *(["compute"] if compute else [])):
            importlib.import_module(f"pyarrow.{module}")
    except ImportError as err:
        raise ImportError(f"reading Parquet or Arrow data needs PyArrow, which is not installed: {EXTRA}") from err
    return pa


@dataclass(frozen=True)
class Column:
    """A column to read: its ``name``, its ``kind`` (``text``: strings; ``label``/``group``: strings or
    integers; ``any``) and the ``option`` that names it (``data.text_column``), for the errors."""

    name: str
    kind: str = "text"
    option: str = ""


@dataclass(frozen=True)
class RowFilter:
    """``where``: column -> value every kept row has; ``sample_fraction``: the share of those kept, drawn
    with ``seed``; ``max_rows``: at most this many rows (the first)."""

    where: Mapping[str, Any] = field(default_factory=dict)
    sample_fraction: float | None = None
    max_rows: int | None = None
    seed: int = 42

    @classmethod
    def of(cls, cfg: Any) -> RowFilter:
        """The filter of a data config (its ``where``, ``sample_fraction``, ``max_rows`` and ``seed``)."""
        return cls(dict(cfg.where or {}), cfg.sample_fraction, cfg.max_rows, cfg.seed)


@dataclass(frozen=True)
class RowBatch:
    """Rows of one file: ``columns`` (name -> values), and where they are: ``path`` and the 1-based
    number of the first row among the rows kept of that file (``first``)."""

    path: Path
    first: int
    columns: dict[str, list[Any]]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def _schema_text(schema: Any) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema)


def _type_ok(pa: ModuleType, kind: str, arrow_type: Any) -> bool:
    t = pa.types
    text = t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_string_view(arrow_type)
    if kind == "text":
        return bool(text)
    if kind in ("label", "group"):
        return bool(text or t.is_integer(arrow_type) or t.is_dictionary(arrow_type))
    return True


def _check_schema(pa: ModuleType, path: Path, schema: Any, columns: Sequence[Column], where: Mapping[str, Any]) -> None:
    names = schema.names
    for col in [*columns, *(Column(name, "any", "data.where") for name in where)]:
        if col.name not in names:
            fix = f"; set {col.option} to one of them" if col.option else ""
            raise ValueError(f"{path}: no column {col.name!r}; the file's columns: {_schema_text(schema)}{fix}")
        arrow_type = schema.field(col.name).type
        if not _type_ok(pa, col.kind, arrow_type):
            fix = f", or set {col.option} to another column" if col.option else ""
            raise ValueError(
                f"{path}: column {col.name!r} is {arrow_type}, not {_KINDS[col.kind]}; convert it{fix} "
                f"(the file's columns: {_schema_text(schema)})"
            )
    for name, value in where.items():
        arrow_type = schema.field(name).type
        t = pa.types
        ok = (
            (t.is_boolean(arrow_type) and isinstance(value, bool))
            or (t.is_integer(arrow_type) and isinstance(value, int) and not isinstance(value, bool))
            or (t.is_floating(arrow_type) and isinstance(value, int | float) and not isinstance(value, bool))
            or (_type_ok(pa, "text", arrow_type) and isinstance(value, str))
            or (t.is_dictionary(arrow_type) and isinstance(value, str))
        )
        if not ok:
            raise ValueError(
                f"{path}: data.where compares column {name!r} ({arrow_type}) with {value!r} "
                f"({type(value).__name__}); give a value of the column's type"
            )


def _corrupt(path: Path, err: Exception) -> ValueError:
    kind = "Parquet" if path.suffix.lower() == ".parquet" else "Arrow"
    return ValueError(
        f"{path}: cannot read this {kind} file ({err}); it is truncated, corrupt or not {kind}: copy or "
        f"download it again, or write it again (e.g. pyarrow.parquet.write_table, DataFrame.to_parquet, "
        f"Dataset.save_to_disk)"
    )


def _open(pa: ModuleType, path: Path) -> tuple[Any, Any]:
    """``(reader, schema)`` of a Parquet file or an Arrow IPC file or stream; a clear error when it is none."""
    try:
        if path.suffix.lower() == ".parquet":
            # pre_buffer (PyArrow's default) keeps every column chunk read in the reader's cache until it is
            # closed: memory grows with the file. Read in 1 MB pieces instead, whatever the row groups' size.
            reader: Any = pa.parquet.ParquetFile(path, pre_buffer=False, buffer_size=BUFFER_BYTES)
            return reader, reader.schema_arrow
        source = pa.memory_map(str(path))
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_stream(source)
        return reader, reader.schema
    except (pa.ArrowException, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise FileNotFoundError(f"data file {path} does not exist") from None
        raise _corrupt(path, err) from None


def file_columns(path: Path) -> list[str]:
    """The column names of a Parquet/Arrow file (its schema only is read)."""
    return list(_open(pyarrow(), path)[1].names)


def _file_batches(pa: ModuleType, path: Path, columns: Sequence[Column], where: Mapping[str, Any]) -> Iterator[Any]:
    """The record batches of one file, only the columns read; its schema checked first."""
    names = list(dict.fromkeys([c.name for c in columns] + list(where)))
    reader, schema = _open(pa, path)
    _check_schema(pa, path, schema, columns, where)
    try:
        if path.suffix.lower() == ".parquet":
            batches: Iterator[Any] = reader.iter_batches(batch_size=BATCH_ROWS, columns=names)
        elif isinstance(reader, pa.ipc.RecordBatchFileReader):
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            batches = iter(reader)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch.select(names)
    except (pa.ArrowException, OSError) as err:
        raise _corrupt(path, err) from None


def iter_row_batches(
    files: Sequence[Path], columns: Sequence[Column], row_filter: RowFilter | None = None
) -> Iterator[RowBatch]:
    """The ``columns`` of the rows of ``files`` (in order) that ``row_filter`` keeps, a batch at a time
    (at most a few thousand rows as Python objects at once)."""
    f = row_filter or RowFilter()
    pa = pyarrow(compute=bool(f.where))
    if f.sample_fraction is not None and not 0.0 < f.sample_fraction <= 1.0:
        raise ValueError(f"data.sample_fraction must be in (0, 1], got {f.sample_fraction}")
    rng = np.random.default_rng(f.seed) if f.sample_fraction is not None else None
    left = math.inf if f.max_rows is None else f.max_rows
    for path in files:
        first = 1
        for batch in _file_batches(pa, path, columns, f.where):
            if left <= 0:
                return
            for name, value in f.where.items():
                batch = batch.filter(pa.compute.equal(batch.column(name), pa.scalar(value)))
            if rng is not None:
                batch = batch.filter(pa.array(rng.random(batch.num_rows) < f.sample_fraction))
            if batch.num_rows > left:
                batch = batch.slice(0, int(left))
            if batch.num_rows == 0:
                continue
            left -= batch.num_rows
            yield RowBatch(path, first, {c.name: batch.column(c.name).to_pylist() for c in columns})
            first += batch.num_rows


class RowPlaces(Sequence[str]):
    """Where each row read is, as ``file:row N`` (two integer arrays, not a string a row)."""

    def __init__(self, files: Sequence[Path], file_index: np.ndarray, rows: np.ndarray) -> None:
        self.files, self.file_index, self.rows = list(files), file_index, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return f"{self.files[int(self.file_index[index])]}:row {int(self.rows[index])}"


def read_rows(
    files: Sequence[Path], columns: Sequence[Column], row_filter: RowFilter | None = None, *, where: str = ""
) -> tuple[dict[str, list[Any]], RowPlaces]:
    """Every kept row's ``columns`` (name -> values) and where each row is (``file:row N``); an error
    naming ``where`` (the option, e.g. ``data.source=...``) when no row is left."""
    out: dict[str, list[Any]] = {c.name: [] for c in columns}
    index = {path: i for i, path in enumerate(files)}
    file_index: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    for batch in iter_row_batches(files, columns, row_filter):
        for name, values in batch.columns.items():
            out[name].extend(values)
        file_index.append(np.full(len(batch), index[batch.path], dtype=np.int32))
        rows.append(np.arange(batch.first, batch.first + len(batch), dtype=np.int64))
    if not rows:
        what = f"{where}: " if where else ""
        filtered = row_filter is not None and (
            bool(row_filter.where) or row_filter.sample_fraction is not None or row_filter.max_rows is not None
        )
        filters = " after data.where / data.sample_fraction / data.max_rows" if filtered else ""
        more = " ..." if len(files) > 3 else ""
        raise ValueError(
            f"{what}no rows{filters} in {', '.join(map(str, files[:3]))}{more}; "
            "give a file with rows (or loosen the filters)"
        )
    return out, RowPlaces(files, np.concatenate(file_index), np.concatenate(rows))
