"""The preference tasks' pairs and feedback and grpo's prompts read from Parquet / Arrow as from JSON lines: the
same records (text and conversations, a list of structs read as messages), rows named ``file:row N`` in errors,
null cells as absent columns, and a folder of named splits refused with what to give instead."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from attnkit.data.preference.read import read_feedback, read_pairs
from attnkit.data.readers.columnar_tasks import read_objects
from attnkit.tasks.grpo.data import read_prompts

USER = [{"role": "user", "content": "Name a colour."}]
PAIRS = [
    {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5", "topic": "sums"},
    {"prompt": USER, "chosen": [{"role": "assistant", "content": "Blue."}],
     "rejected": [{"role": "assistant", "content": "Seven."}], "topic": "colours"},
]  # fmt: skip
FEEDBACK = [
    {"prompt": "2 + 2 =", "completion": " 4", "label": True},
    {"prompt": "2 + 2 =", "completion": " 5", "label": False},
]
PROMPTS = [{"prompt": "Reverse 123", "answer": "321"}, {"prompt": "Reverse 45", "answer": "54"}]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _parquet(path: Path, rows: list[dict]) -> Path:
    """Rows whose columns mix text and conversations: each column as JSON text, then decoded to Arrow by the
    rows' own types (a text column, or a list of {role, content} structs)."""
    columns = {k: [r.get(k) for r in rows] for k in rows[0]}
    arrays = {}
    for name, values in columns.items():
        if any(isinstance(v, list) for v in values):  # conversations; text rows of this column become null
            arrays[name] = pa.array([v if isinstance(v, list) else None for v in values])
        else:
            arrays[name] = pa.array(values)
    pq.write_table(pa.table(arrays), path)
    return path


def test_pairs_feedback_and_prompts_read_from_parquet_and_arrow_as_from_jsonl(tmp_path: Path) -> None:
    text_pairs = [PAIRS[0], {**PAIRS[0], "prompt": "3 + 3 =", "chosen": " 6"}]
    for rows, read in [(text_pairs, read_pairs), (FEEDBACK, read_feedback), (PROMPTS, read_prompts)]:
        jsonl = read(_jsonl(tmp_path / "r.jsonl", rows))
        parquet = read(_parquet(tmp_path / "r.parquet", rows))
        feather.write_feather(pa.Table.from_pylist(rows), tmp_path / "r.arrow")
        arrow = read(tmp_path / "r.arrow")
        strip = [{k: v for k, v in vars(r).items() if k != "where"} for r in jsonl]
        assert [{k: v for k, v in vars(r).items() if k != "where"} for r in parquet] == strip
        assert [{k: v for k, v in vars(r).items() if k != "where"} for r in arrow] == strip
        assert [r.where for r in parquet] == [f"{tmp_path / 'r.parquet'}:row {i}" for i in (1, 2)]
    chats = [PAIRS[1], {**PAIRS[1], "topic": "more"}]
    assert read_pairs(_parquet(tmp_path / "c.parquet", chats), group_key="topic") == [
        r.__class__(r.prompt, r.chosen, r.rejected, r.group, f"{tmp_path / 'c.parquet'}:row {i}")
        for i, r in enumerate(read_pairs(_jsonl(tmp_path / "c.jsonl", chats), group_key="topic"), 1)
    ]


def test_a_bad_row_is_named_and_null_cells_are_absent_columns(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "bad.parquet", [PAIRS[0], {**PAIRS[0], "rejected": None}])
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'bad.parquet'}:row 2: .*rejected"):
        read_pairs(path)
    rows = list(read_objects(path, "preference data"))
    assert "rejected" not in rows[1][0] and rows[0][0]["rejected"] == " 5"


def test_a_folder_of_named_splits_is_refused_with_what_to_give(tmp_path: Path) -> None:
    folder = tmp_path / "hub"
    (folder / "data").mkdir(parents=True)
    for split in ("train", "test"):
        _parquet(folder / "data" / f"{split}-00000-of-00001.parquet", FEEDBACK)
    with pytest.raises(
        ValueError, match=r"holds the splits \['test', 'train'\]; .* give its train files as data.source"
    ):
        read_feedback(folder)
    assert len(read_feedback(folder / "data" / "train-00000-of-00001.parquet")) == 2
