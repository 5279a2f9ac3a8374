"""attnkit.io.decode_utf8: UTF-8 text (a byte order mark dropped), or an error naming the line and column."""

from __future__ import annotations

import pytest

from attnkit.errors import ConfigError
from attnkit.io import decode_utf8


def test_text_and_a_byte_order_mark() -> None:
    assert decode_utf8(b"\xef\xbb\xbfcaf\xc3\xa9\r\nx", "f.txt") == "café\r\nx"
    assert decode_utf8(b"", "f.txt") == ""


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b"ab\xe9", "f.txt:1: not UTF-8 (byte 0xe9 at column 3)"),
        (b"x\nyz\nab\xe9cd", "f.txt:3: not UTF-8 (byte 0xe9 at column 3)"),
        (b"\xef\xbb\xbf\xff", "f.txt:1: not UTF-8 (byte 0xff at column 4)"),  # the mark's 3 bytes come first
        (b"\xef\xbb\xbfok\n\xc3", "f.txt:2: not UTF-8 (byte 0xc3 at column 1)"),
    ],
)
def test_the_error_says_where(raw: bytes, where: str) -> None:
    with pytest.raises(ValueError) as err:
        decode_utf8(raw, "f.txt")
    assert str(err.value) == where


def test_the_error_type_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"^c.yaml:1: not UTF-8 \(byte 0x80 at column 1\); save it as UTF-8$"):
        decode_utf8(b"\x80", "c.yaml", error=ConfigError, fix="save it as UTF-8")
