"""Files written atomically: readers never see a half-written file (checkpoints, run metadata,
caches, reports); and text read as UTF-8 with an error that says where it is not. Below every other
layer: it imports nothing of attnkit."""

from __future__ import annotations

import codecs
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["decode_utf8", "json_body", "write_atomic", "write_json_atomic", "write_text_atomic"]


def decode_utf8(raw: bytes, where: str | Path, *, error: type[Exception] = ValueError, fix: str = "") -> str:
    """``raw`` decoded as UTF-8 (a leading byte order mark dropped). Bytes that are not UTF-8 raise
    ``error`` naming ``where`` (the file), the line, the byte and its column, then ``fix``."""
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return str(memoryview(raw)[bom:], "utf-8")
    except UnicodeDecodeError as err:
        start = bom + err.start
        line = raw.count(b"\n", 0, start) + 1
        column = start - raw.rfind(b"\n", 0, start)
        then = f"; {fix}" if fix else ""
        raise error(f"{where}:{line}: not UTF-8 (byte {raw[start]:#04x} at column {column}){then}") from None


def json_body(raw: bytes) -> Any:
    """A request body parsed as JSON; every way it cannot be (not UTF-8, not JSON, nested too deeply for the
    parser, an integer past Python's conversion limit) is a ``ValueError`` whose message a client can act on."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the request body is not valid JSON: {err}") from None
    except ValueError:  # valid JSON, but an integer past Python's conversion limit
        raise ValueError(
            f"the request body holds an integer of more than {sys.get_int_max_str_digits()} digits: "
            "send numbers of ordinary size"
        ) from None
    except RecursionError:  # "[[[[...": the parser's recursion, within the body's size limit
        raise ValueError(
            "the request body's JSON is nested too deeply: send an object of the request's fields"
        ) from None


def write_atomic(path: str | Path, write: Callable[[str], Any]) -> None:
    """Call ``write(tmp_path)`` then rename ``tmp_path`` over ``path`` (the same folder, so the rename
    is atomic); on any error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON to ``path`` atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
