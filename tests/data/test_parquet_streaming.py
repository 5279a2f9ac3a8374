"""The lm task's Parquet corpus reader, as fast as the ``.txt`` one (issue 38's benchmark,
``benchmarks/data_scale.py --format parquet``): documents a record batch at a time without a Python loop a
row, PyArrow's ``compute`` module imported only for ``data.where`` (half a second), and the tokenizing
workers chosen by the size of the text, not of the compressed file."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnkit.data.lm import module as lm_module
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.readers import arrow_rows
from attnkit.data.readers.arrow_rows import RowFilter
from attnkit.data.readers.columnar_tasks import iter_texts

TEXTS = [f"doc {i}" for i in range(10)]


def test_documents_are_stripped_and_null_or_blank_rows_skipped_in_every_batch(tmp_path: Path) -> None:
    rows = ["  first \n", None, "", " \n\t ", "second", None, "\u3000third\u00a0", "x"]
    pq.write_table(pa.table({"text": rows * 3}), tmp_path / "c.parquet", row_group_size=3)  # batches split anywhere
    assert list(iter_texts([tmp_path / "c.parquet"])) == ["first", "second", "third", "x"] * 3
    assert list(iter_texts([tmp_path / "c.parquet"], row_filter=RowFilter(max_rows=2))) == ["first"]


def test_pyarrow_compute_is_imported_only_for_a_where_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a corpus does not ask for ``pyarrow.compute`` (half a second to import, in every cache build);
    ``data.where`` does (and filters)."""
    table = pa.table({"text": TEXTS, "lang": ["en", "fr"] * 5})
    pq.write_table(table, tmp_path / "c.parquet")
    asked: list[str] = []

    def import_module(name: str) -> ModuleType:
        asked.append(name)
        return importlib.import_module(name)

    monkeypatch.setattr(arrow_rows, "importlib", SimpleNamespace(import_module=import_module))
    assert len(list(iter_texts([tmp_path / "c.parquet"]))) == 10
    assert asked and "pyarrow.compute" not in asked
    assert list(iter_texts([tmp_path / "c.parquet"], row_filter=RowFilter(where={"lang": "en"}))) == TEXTS[::2]
    assert "pyarrow.compute" in asked


def test_tokenizing_workers_are_chosen_by_the_size_of_the_text_not_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet compresses: 200 documents of 400 characters (80 kB of text) are a file of a few kB. The build
    asks :func:`attnkit.data.encode.tokenize_workers` with the text's size, as for the same ``.txt`` file."""
    docs = [f"{i} " + "abcd " * 79 + "abcd" for i in range(200)]
    pq.write_table(pa.table({"text": docs}), tmp_path / "c.parquet")
    (tmp_path / "c.txt").write_text("\n\n".join(docs) + "\n")
    asked: list[int] = []

    def workers(requested: int | None, tokenizer: object, nbytes: int) -> int:
        asked.append(nbytes)
        return 1

    monkeypatch.setattr(lm_module, "tokenize_workers", workers)
    for name in ("c.parquet", "c.txt"):
        cfg = LMDataConfig(source=str(tmp_path / name), cache_dir=str(tmp_path / "cache"), tokenizer="word")
        LanguageModelDataModule(cfg, block=16).prepare_data()
    text = sum(map(len, docs))
    assert (tmp_path / "c.parquet").stat().st_size < text // 4
    assert asked == [text, (tmp_path / "c.txt").stat().st_size]  # the .txt file: its bytes


def test_arrow_memory_stays_at_a_batch_while_a_file_of_many_row_groups_is_read(tmp_path: Path) -> None:
    """PyArrow's ``ParquetFile`` pre-buffers by default and keeps every column chunk it read until it is
    closed: its allocations grew with the file (a 154 MB file of 400 MB of text: 147 MB held at the end).
    Read without it, Arrow holds about a batch (4096 rows: 0.25 MB here) however many row groups were read.
    Random letters barely compress, so the file is about as large as its text (a repeated text compresses
    to nothing and would hide this)."""
    rng = np.random.default_rng(0)
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(tmp_path / "c.parquet", schema) as writer:
        for _ in range(48):  # 48 row groups of 4096 documents of 64 letters
            letters = rng.integers(ord("a"), ord("z") + 1, size=(4096, 64), dtype=np.uint8)
            docs = [row.tobytes().decode() for row in letters]
            writer.write_table(pa.table({"text": docs}, schema=schema))
    assert (tmp_path / "c.parquet").stat().st_size > 10 << 20
    before = pa.total_allocated_bytes()
    held = 0
    for n, _ in enumerate(iter_texts([tmp_path / "c.parquet"]), 1):
        if n % 1024 == 0:
            held = max(held, pa.total_allocated_bytes() - before)
    assert n == 48 * 4096
    assert held < 4 << 20, held  # the whole file is 10+ MB
