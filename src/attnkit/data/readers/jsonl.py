"""The JSON Lines files of the conversation, preference and prompt readers: one JSON object a line, blank lines
skipped, every problem a ``ValueError`` naming ``file:line``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnkit.io import decode_utf8

__all__ = ["jsonl_objects"]


def jsonl_objects(path: str | Path, what: str) -> Iterator[tuple[dict[str, Any], str]]:
    """``(object, "file:line")`` for every non-blank line of the ``.jsonl`` file ``path``. ``what``: what the
    file holds, for the messages (``"conversations"``). A file that is not ``.jsonl``, missing, not UTF-8,
    malformed JSON or a line that is not an object: a ``ValueError`` (``FileNotFoundError``) saying so."""
    path = Path(path)
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"{path}: {what} are read from .jsonl files (one JSON object a line), got {path.suffix!r}")
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    fix = f"save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.jsonl`"
    for number, raw in enumerate(decode_utf8(path.read_bytes(), path, fix=fix).splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: malformed JSON: {err.msg} (column {err.colno})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield obj, where
