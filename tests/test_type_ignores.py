"""Every ``# type: ignore`` in the package names its error code and says why, on the same line:
``x = f()  # type: ignore[arg-type]  # f is untyped in torch 2.4``."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import attnkit

SRC = Path(attnkit.__file__).parent
IGNORE = re.compile(r"type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)")


def unexplained(text: str) -> list[tuple[int, str]]:
    """``(line, comment)`` of each ``type: ignore`` comment in ``text`` without an error code or a reason
    (a further ``#`` comment with words after the ignore)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        match = IGNORE.search(tok.string)
        if match is None:
            continue
        reason = match["rest"].strip().lstrip("#").strip()
        if not match["codes"] or not re.search(r"[A-Za-z]{3,}", reason):
            out.append((tok.start[0], tok.string))
    return out


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    missing = [
        f"{path.relative_to(SRC.parent)}:{line}: {comment}"
        for path in sorted(SRC.rglob("*.py"))
        for line, comment in unexplained(path.read_text())
    ]
    assert not missing, "type: ignore without a code and a reason beside it:\n" + "\n".join(missing)


def test_the_check_tells_them_apart() -> None:
    text = (
        "a = 1  # type: ignore\n"
        "b = 2  # type: ignore[arg-type]\n"
        "c = 3  # type: ignore[arg-type]  # torch's stub says int, it takes a float\n"
        "d = '# type: ignore'\n"
    )
    assert [line for line, _ in unexplained(text)] == [1, 2]
