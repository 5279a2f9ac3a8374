"""Parquet, Arrow and `datasets` folders: where a source's rows and splits are (a file, a glob, a folder of
shards, `save_to_disk` folders written by `datasets`, a Hub dataset folder), the row filters (`where`,
`sample_fraction`, `max_rows`), and a clear error naming the file and the fix for every problem: a missing
column, a wrong dtype, a truncated or corrupt file, no rows, PyArrow not installed."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.readers import arrow_rows
from attnkit.data.readers.arrow_rows import Column, RowFilter, file_columns, iter_row_batches, read_rows
from attnkit.data.readers.columnar import ALL, is_columnar, open_columnar
from attnkit.data.readers.columnar_tasks import iter_texts, read_chat_rows, read_labelled, split_parts

TEXTS = [f"text number {i}" for i in range(30)]
LABELS = ["pos" if i % 3 else "neg" for i in range(30)]


def _table(n: int = 30) -> pa.Table:
    return pa.table({"text": TEXTS[:n], "label": LABELS[:n], "n": list(range(n)), "lang": ["en", "es"] * (n // 2)})


def _texts(files: list[Path], row_filter: RowFilter | None = None) -> list[str]:
    return read_rows(files, [Column("text")], row_filter)[0]["text"]


def test_a_file_a_glob_and_a_folder_of_shards_read_the_same_rows(tmp_path: Path) -> None:
    table = _table()
    pq.write_table(table, tmp_path / "one.parquet", row_group_size=7)
    feather.write_feather(table, tmp_path / "one.feather")
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, start in enumerate(range(0, 30, 10)):  # names sort in row order
        pq.write_table(table.slice(start, 10), shards / f"part-{i:05d}.parquet")
    for source in ("one.parquet", "one.feather", "shards", "shards/*.parquet"):
        opened = open_columnar(str(tmp_path / source))
        assert is_columnar(str(tmp_path / source)) and not opened.has_splits
        assert _texts(opened.files) == TEXTS, source
    assert not is_columnar(str(tmp_path / "x.csv")) and not is_columnar(None)
    assert file_columns(tmp_path / "one.feather") == ["text", "label", "n", "lang"]


def test_save_to_disk_folders_written_by_datasets(tmp_path: Path) -> None:
    rows = {"text": TEXTS, "label": LABELS}
    d = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({k: v[:20] for k, v in rows.items()}),
            "validation": datasets.Dataset.from_dict({k: v[20:25] for k, v in rows.items()}),
            "test": datasets.Dataset.from_dict({k: v[25:] for k, v in rows.items()}),
        }
    )
    d.save_to_disk(str(tmp_path / "dict"), num_shards={"train": 2, "validation": 1, "test": 1})
    opened = open_columnar(str(tmp_path / "dict"))
    assert sorted(opened.parts) == ["test", "train", "val"] and len(opened.parts["train"]) == 2
    assert _texts(opened.parts["train"]) == TEXTS[:20]  # IPC streams, in state.json's order
    assert _texts(opened.parts["val"]) == TEXTS[20:25] and _texts(opened.parts["test"]) == TEXTS[25:]
    # a split given as a file replaces the source's own
    pq.write_table(_table(4), tmp_path / "val.parquet")
    main, given = split_parts(str(tmp_path / "dict"), str(tmp_path / "val.parquet"), None)
    assert main == opened.parts["train"] and given == {"val": [tmp_path / "val.parquet"], "test": opened.parts["test"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "single"))
    single = open_columnar(str(tmp_path / "single"))
    assert list(single.parts) == [ALL] and _texts(single.files) == TEXTS


def test_hub_dataset_folder_splits_from_file_names_and_from_the_readme(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    table = _table()
    pq.write_table(table.slice(0, 10), repo / "data" / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(10, 10), repo / "data" / "train-00001-of-00002.parquet")
    pq.write_table(table.slice(20, 10), repo / "data" / "test-00000-of-00001.parquet")
    parts = open_columnar(str(repo)).parts
    assert sorted(parts) == ["test", "train"] and _texts(parts["train"]) == TEXTS[:20]
    assert _texts(parts["test"]) == TEXTS[20:]
    # the README's configs say which files are which split
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/test-*\n"
        "  - split: validation\n    path: data/train-00001-*\n---\n# a card\n"
    )
    parts = open_columnar(str(repo)).parts
    assert _texts(parts["train"]) == TEXTS[20:] and _texts(parts["val"]) == TEXTS[10:20] and "test" not in parts
    (repo / "README.md").unlink()
    pq.write_table(table, repo / "extra.parquet")  # names no split while the others do
    with pytest.raises(ValueError, match=r"extra\.parquet names no split .* move it out of the folder or rename"):
        open_columnar(str(repo))


def test_layout_errors_name_the_folder_and_the_fix(tmp_path: Path) -> None:
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"text": ["a"]})}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ValueError, match=r"has the splits \['val'\] but no train split; give the training data"):
        open_columnar(str(tmp_path / "d"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"folder without \.parquet/\.arrow/\.feather files"):
        open_columnar(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="no file matches this glob"):
        open_columnar(str(tmp_path / "nothing/*.parquet"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_columnar(str(tmp_path / "missing.parquet"))


def test_where_sample_fraction_and_max_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq.write_table(_table(), tmp_path / "a.parquet", row_group_size=4)
    feather.write_feather(_table(), tmp_path / "a.feather", chunksize=11)
    files = [tmp_path / "a.parquet"]
    assert _texts(files, RowFilter(where={"lang": "es"})) == TEXTS[1::2]
    assert _texts(files, RowFilter(where={"lang": "es", "n": 3})) == [TEXTS[3]]
    assert _texts(files, RowFilter(max_rows=5)) == TEXTS[:5]
    sample = _texts(files, RowFilter(sample_fraction=0.5, seed=1))
    assert 5 <= len(sample) <= 25 and set(sample) < set(TEXTS)
    # the same rows from batches of another size (the feather file's 11 rows), another sample for another seed
    assert _texts([tmp_path / "a.feather"], RowFilter(sample_fraction=0.5, seed=1)) == sample
    assert _texts(files, RowFilter(sample_fraction=0.5, seed=2)) != sample
    both = _texts(files, RowFilter(where={"lang": "en"}, sample_fraction=0.5, max_rows=3, seed=1))
    assert len(both) == 3 and set(both) <= set(TEXTS[::2])
    monkeypatch.setattr(arrow_rows, "BATCH_ROWS", 4)
    batches = list(iter_row_batches(files, [Column("text")], RowFilter(max_rows=6)))
    assert [(b.first, len(b)) for b in batches] == [(1, 4), (5, 2)]  # streamed a batch at a time
    assert _texts(files, RowFilter(sample_fraction=0.5, seed=1)) == sample  # the same rows for any batch size
    with pytest.raises(ValueError, match=r"data\.where compares column 'n' \(int64\) with '3' \(str\)"):
        _texts(files, RowFilter(where={"n": "3"}))
    with pytest.raises(ValueError, match=r"no rows after data\.where / data\.sample_fraction / data\.max_rows"):
        _texts(files, RowFilter(where={"lang": "fr"}))


def test_filters_of_a_source_that_is_not_parquet_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data\.max_rows filters the rows of Parquet/Arrow data; .* is not"):
        LMDataConfig(source="grammar", max_rows=3)
    (tmp_path / "a.csv").write_text("text,label\na,b\n")
    with pytest.raises(ValueError, match=r"data\.where is empty"):
        ClassifyDataConfig(source=str(tmp_path / "a.csv"), where={})
    pq.write_table(_table(), tmp_path / "a.parquet")
    assert ClassifyDataConfig(source=str(tmp_path / "a.parquet"), where={"lang": "en"}, max_rows=2).max_rows == 2


def test_missing_column_and_wrong_dtype_list_the_file_columns(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(_table(), path)
    with pytest.raises(ValueError) as err:
        read_labelled([path], text_column="review")
    assert str(err.value) == (
        f"{path}: no column 'review'; the file's columns: text (string), label (string), n (int64), lang (string); "
        "set data.text_column to one of them"
    )
    with pytest.raises(ValueError, match=r"column 'n' is int64, not a string; convert it, or set data\.text_column"):
        read_labelled([path], text_column="n")
    pq.write_table(pa.table({"text": ["a"], "label": [0.5]}), tmp_path / "float.parquet")
    with pytest.raises(ValueError, match=r"float\.parquet: column 'label' is double, not a string or an integer"):
        read_labelled([tmp_path / "float.parquet"])
    pq.write_table(pa.table({"text": ["a", None], "label": ["x", "y"]}), tmp_path / "null.parquet")
    with pytest.raises(ValueError, match=r"null\.parquet:row 2: empty text in column 'text'; fill it in or drop"):
        read_labelled([tmp_path / "null.parquet"])
    pq.write_table(pa.table({"question": ["a"]}), tmp_path / "q.parquet")
    with pytest.raises(ValueError, match=r"q\.parquet: no conversation columns; the file's columns: \['question'\]"):
        read_chat_rows([tmp_path / "q.parquet"])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "arrow"])
def test_truncated_or_corrupt_files_are_a_clear_error(tmp_path: Path, damage: str) -> None:
    good = tmp_path / "good.parquet"
    pq.write_table(_table(), good)
    raw = good.read_bytes()
    if damage == "arrow":
        feather.write_feather(_table(), tmp_path / "good.feather")
        path, raw = tmp_path / "bad.arrow", (tmp_path / "good.feather").read_bytes()[:300]
    else:
        path = tmp_path / "bad.parquet"
        raw = raw[: len(raw) // 2] if damage == "truncated" else b"not parquet at all, " * 20
    path.write_bytes(raw)
    kind = "Arrow" if damage == "arrow" else "Parquet"
    with pytest.raises(ValueError, match=rf"{path.name}: cannot read this {kind} file .* truncated, corrupt or not"):
        _texts([path])


def test_a_truncated_data_page_fails_while_streaming_with_the_same_error(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": [f"row {i} " * 20 for i in range(2000)]}), path, row_group_size=500)
    raw = bytearray(path.read_bytes())
    meta = pq.ParquetFile(path).metadata
    start = meta.row_group(2).column(0).data_page_offset
    raw[start + 30 : start + 4000] = b"\xff" * (4000 - 30)  # a later row group's page, overwritten
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"big\.parquet: cannot read this Parquet file"):
        _texts([path])


def test_without_pyarrow_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"needs PyArrow, which is not installed: pip install 'attnkit\[parquet\]'"):
        arrow_rows.pyarrow()
    with pytest.raises(ImportError, match=r"attnkit\[parquet\]"):
        _texts([tmp_path / "a.parquet"])


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _corpus(path: Path, mb: int) -> None:
    """``mb`` MB of distinct documents (1 KB each), written a row group at a time."""
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for group in range(mb):
            docs = [f"{group:06d}-{i:04d} " + "abcdefghij" * 100 for i in range(1024)]
            writer.write_table(pa.table({"text": docs}, schema=schema))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_parquet_corpus_streams_with_flat_resident_memory(tmp_path: Path) -> None:
    """Reading the documents of a 48 MB corpus grows the resident memory no more than reading those of a
    6 MB one (within 16 MB): a record batch at a time, never the corpus as Python strings (48 MB of them
    would be 70+ MB)."""
    growth = {}
    for mb in (6, 48):
        _corpus(tmp_path / f"c{mb}.parquet", mb)
        gc.collect()
        before = peak = _rss()
        chars = 0
        for i, text in enumerate(iter_texts([tmp_path / f"c{mb}.parquet"])):
            chars += len(text)
            if i % 256 == 0:
                peak = max(peak, _rss())
        assert chars >= mb * 1024 * 1000  # every document read
        growth[mb] = peak - before
    assert growth[48] - growth[6] < 16 << 20, growth
