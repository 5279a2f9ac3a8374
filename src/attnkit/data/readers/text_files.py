"""Plain UTF-8 text corpora: a file, a folder of ``*.txt`` files or a glob, streamed as documents."""

from __future__ import annotations

import codecs
import glob
import re
from collections.abc import Iterator
from pathlib import Path

__all__ = ["corpus_files", "iter_documents", "read_corpus", "split_documents"]


def read_corpus(path: str | Path, split_on: str = "blank_line") -> list[str]:
    """The documents of a UTF-8 text file, a folder of ``*.txt`` files or a glob, as a list (a leading
    BOM is ignored; ``\\r\\n`` reads as ``\\n``); the data module streams them instead (:func:`iter_documents`).

    ``split_on="blank_line"``: documents are separated by blank (or whitespace-only) lines and keep
    their inner line breaks; ``"line"``: every non-blank line is a document. Surrounding
    whitespace of each document is removed. Errors: a missing file, bytes that are not UTF-8 (the
    message gives the line and byte offset), and a corpus without any text.
    """
    docs = list(iter_documents(corpus_files(str(path)), split_on))
    if not docs:
        raise ValueError(f"{path}: the corpus is empty (no non-blank text); nothing to train on")
    return docs


def split_documents(text: str, split_on: str = "blank_line") -> list[str]:
    """Documents of ``text`` (see :func:`read_corpus`); blank documents are dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if split_on == "blank_line":
        parts = re.split(r"\n[^\S\n]*\n", text)
    elif split_on == "line":
        parts = text.split("\n")
    else:
        raise ValueError(f"split_on must be 'blank_line' or 'line', got {split_on!r}")
    return [p.strip() for p in parts if p.strip()]


def corpus_files(source: str) -> list[Path]:
    """The text files of ``data.source``: a file, a folder (its ``*.txt`` files, recursively) or a
    glob (``"corpus/*.txt"``), in sorted path order."""
    path = Path(source).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"data.source={source!r} is a folder without *.txt files; give a text file or a glob")
        return files
    if any(c in source for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"data.source={source!r}: no file matches this glob")
        return files
    raise FileNotFoundError(f"data.source: text file {path} does not exist (or use data.source=grammar)")


_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


def iter_documents(paths: list[Path], split_on: str = "blank_line", chunk_bytes: int = 1 << 22) -> Iterator[str]:
    """The documents of ``paths`` (as :func:`read_corpus`), streamed: files are read ``chunk_bytes``
    at a time, so memory does not grow with the corpus."""
    if split_on not in ("blank_line", "line"):
        raise ValueError(f"split_on must be 'blank_line' or 'line', got {split_on!r}")
    for path in paths:
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        carry, offset, lines, line_start = "", 0, 0, 0
        with path.open("rb") as f:
            while True:
                raw = f.read(chunk_bytes)
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as err:
                    at = offset + err.start
                    line = lines + raw.count(b"\n", 0, err.start) + 1
                    nl = raw.rfind(b"\n", 0, err.start)
                    column = err.start - nl if nl >= 0 else at - line_start + 1
                    raise ValueError(
                        f"{path}:{line}: not valid UTF-8 at byte offset {at} (line {line}, byte {column} of the line: "
                        f"{raw[err.start : err.start + 4]!r}); save the file as UTF-8, "
                        f"e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.txt`"
                    ) from None
                lines += raw.count(b"\n")
                nl = raw.rfind(b"\n")
                line_start = offset + nl + 1 if nl >= 0 else line_start
                offset += len(raw)
                text = (carry + text).replace("\r\n", "\n")
                if raw and text.endswith("\r"):  # a "\r\n" may straddle two chunks
                    text, tail = text[:-1], "\r"
                else:
                    tail = ""
                text = text.replace("\r", "\n")
                parts = _BLANK_LINE.split(text) if split_on == "blank_line" else text.split("\n")
                carry = (parts.pop() if raw else "") + tail
                for part in parts:
                    part = part.strip()
                    if part:
                        yield part
                if not raw:
                    break
