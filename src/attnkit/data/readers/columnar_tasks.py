"""What each task reads from Parquet / Arrow data: documents (lm), labelled texts (classify), sentence
pairs (translate), conversations (sft), records of named columns (the preference tasks' pairs and feedback,
grpo's prompts: :func:`read_objects`, which reads ``.jsonl`` files too); and which files hold the run's splits.

A split is a *part*: the files of a columnar source (``list[Path]``), or the path of a file of another
format (``str``, read by the task's own reader). Rows are numbered from 1 within each file in errors
(``train-00000-of-00001.parquet:row 12: ...``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnkit.data.readers.arrow_rows import Column, RowFilter, file_columns, iter_row_batches, read_rows
from attnkit.data.readers.chats import Chat, chat_messages
from attnkit.data.readers.columnar import ALL, ColumnarSource, is_columnar, open_columnar
from attnkit.data.readers.jsonl import jsonl_objects

__all__ = [
    "CHAT_COLUMNS",
    "Part",
    "iter_texts",
    "read_chat_rows",
    "read_labelled",
    "read_objects",
    "read_pair_columns",
    "split_parts",
]

Part = list[Path] | str
# the columns a conversation may be read from (see attnkit.data.readers.chats)
CHAT_COLUMNS = ("messages", "prompt", "completion", "instruction", "input", "output", "system")


def _files(source: str, role: str) -> Part:
    return open_columnar(source, role).files if is_columnar(source) else source


def split_parts(source: str, val_source: str | None, test_source: str | None) -> tuple[Part, dict[str, Part]]:
    """The training part (all of ``source``, or its ``train`` split) and the splits given: ``val_source`` /
    ``test_source``, else the source's own ``val`` / ``test`` splits when its layout names them (a
    ``save_to_disk`` ``DatasetDict``, a Hub dataset folder). Splits not given are cut from the training part."""
    given: dict[str, Part] = {}
    if is_columnar(source):
        opened: ColumnarSource = open_columnar(source)
        main: Part = opened.parts.get("train", opened.parts.get(ALL, []))
        given.update({s: files for s, files in opened.parts.items() if s in ("val", "test")})
    else:
        main = source
    for split, path in (("val", val_source), ("test", test_source)):
        if path:
            given[split] = _files(path, f"data.{split}_source")
    return main, given


def _where(files: list[Path]) -> str:
    return str(files[0]) if len(files) == 1 else f"{files[0]} (+{len(files) - 1} more)"


def read_labelled(
    files: list[Path],
    text_column: str = "text",
    label_column: str = "label",
    group_column: str | None = None,
    row_filter: RowFilter | None = None,
) -> tuple[list[str], list[object], list[str] | None]:
    """Texts, raw labels (``str`` or ``int``) and groups (``str``; None without ``group_column``) of every
    row kept; an empty text, a missing label or group is an error naming the file and row."""
    columns = [Column(text_column, "text", "data.text_column"), Column(label_column, "label", "data.label_column")]
    if group_column is not None:
        columns.append(Column(group_column, "group", "data.group_column"))
    rows, places = read_rows(files, columns, row_filter, where=_where(files))
    texts, labels = rows[text_column], rows[label_column]
    for i, text in enumerate(texts):
        if text is None or not text.strip():
            raise ValueError(f"{places[i]}: empty text in column {text_column!r}; fill it in or drop the row")
    for i, label in enumerate(labels):
        if label is None or (isinstance(label, str) and not label.strip()):
            raise ValueError(f"{places[i]}: no label in column {label_column!r}; fill it in or drop the row")
    labels = [y.strip() if isinstance(y, str) else y for y in labels]
    groups = None
    if group_column is not None:
        groups = [str(g) for g in rows[group_column]]
        missing = next((i for i, g in enumerate(rows[group_column]) if g is None or g == ""), None)
        if missing is not None:
            raise ValueError(f"{places[missing]}: no group in column {group_column!r} (data.group_column)")
    return texts, labels, groups


def read_pair_columns(
    files: list[Path], source_column: str, target_column: str, row_filter: RowFilter | None = None
) -> list[tuple[str, str]]:
    """``(source, target)`` of every row kept, both stripped; an empty side is an error naming the file and row."""
    columns = [Column(source_column, "text", "data.source_column"), Column(target_column, "text", "data.target_column")]
    rows, places = read_rows(files, columns, row_filter, where=_where(files))
    pairs = []
    for i, (s, t) in enumerate(zip(rows[source_column], rows[target_column], strict=True)):
        if s is None or t is None or not s.strip() or not t.strip():
            side = source_column if s is None or not s.strip() else target_column
            raise ValueError(f"{places[i]}: empty {side!r}; fill it in or drop the row")
        pairs.append((s.strip(), t.strip()))
    return pairs


def read_chat_rows(
    files: list[Path],
    messages_column: str = "messages",
    group_column: str | None = None,
    row_filter: RowFilter | None = None,
) -> list[Chat]:
    """The conversation of every row kept, in any layout of :mod:`attnkit.data.readers.chats` (its keys are
    the columns; ``messages_column`` is read as ``messages``): a list of ``{role, content}`` structs, or
    ``prompt``/``completion``, or ``instruction``/``input``/``output`` columns."""
    names = set(file_columns(files[0]))
    wanted = [messages_column if c == "messages" else c for c in CHAT_COLUMNS]
    present = [c for c in wanted if c in names]
    if (
        messages_column not in names
        and not {"prompt", "completion"} <= names
        and not {"instruction", "output"} <= names
    ):
        raise ValueError(
            f"{files[0]}: no conversation columns; the file's columns: {sorted(names)}; expected "
            f"{messages_column!r} (data.messages_column: a list of {{role, content}}), prompt/completion, "
            "or instruction/input/output"
        )
    columns = [Column(c, "any") for c in present]
    if group_column is not None:
        columns.append(Column(group_column, "group", "data.group_column"))
    rows, places = read_rows(files, columns, row_filter, where=_where(files))
    chats = []
    for i in range(len(places)):
        record = {("messages" if c == messages_column else c): rows[c][i] for c in present}
        record = {k: v for k, v in record.items() if v is not None}
        where = places[i]
        group = None
        if group_column is not None:
            value = rows[group_column][i]
            if value is None or value == "":
                raise ValueError(f"{where}: no group in column {group_column!r} (data.group_column)")
            group = str(value)
        chats.append(Chat(chat_messages(record, where), group, where))
    return chats


def iter_texts(files: list[Path], text_column: str = "text", row_filter: RowFilter | None = None) -> Iterator[str]:
    """The documents of a Parquet/Arrow corpus, one per row kept (surrounding whitespace removed; blank and
    null rows skipped), streamed a record batch at a time."""
    for batch in iter_row_batches(files, [Column(text_column, "text", "data.text_column")], row_filter):
        texts = batch.columns[text_column]
        if None in texts:
            texts = [t for t in texts if t is not None]
        yield from filter(None, map(str.strip, texts))  # no Python loop a row (the lm cache reads it 3 times)


def read_objects(source: str | Path, what: str, role: str = "data.source") -> Iterator[tuple[dict[str, Any], str]]:
    """``(record, where)`` for every record of ``source``: the lines of a ``.jsonl`` file (``file:line``), or the
    rows of Parquet / Arrow data (a file, a folder of shards, a glob: ``file:row N``), each a dict of its
    columns (null cells left out; a list of structs is a list of dicts). A folder with named splits is refused:
    its splits go to ``data.source`` / ``data.val_source`` / ``data.test_source`` one by one."""
    if not is_columnar(source):
        yield from jsonl_objects(source, what)
        return
    opened = open_columnar(source, role)
    if opened.has_splits:
        raise ValueError(
            f"{role}={str(source)!r} holds the splits {sorted(opened.parts)}; {what} are read one split a "
            "source: give its train files as data.source and the others as data.val_source / data.test_source"
        )
    files = opened.files
    columns = [Column(name, "any") for name in file_columns(files[0])]
    for batch in iter_row_batches(files, columns):
        for i in range(len(batch)):
            record = {name: values[i] for name, values in batch.columns.items() if values[i] is not None}
            yield record, f"{batch.path}:row {batch.first + i}"
