"""Byte-level BPE in NumPy, many pieces at once, with exactly the ids of Hugging Face ``tokenizers``.

:func:`split_ascii_bpe` splits ASCII text as GPT-2's pre-tokenizer does; :class:`BytePairs` merges
the pieces' bytes as Hugging Face's byte-level BPE does. Both serve
:class:`attnkit.text.chunk_encoder.ChunkEncoder` for the ``bpe`` kind.
``tests/data/test_byte_pairs.py`` compares them with the regex's and Hugging Face's results.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from attnkit.text.tokenizer_kinds import ASCII_WHITESPACE

__all__ = ["BytePairs", "split_ascii_bpe"]

_SPACE = 0x20

_OTHER, _LETTER, _DIGIT, _SPACE_CLASS = 0, 1, 2, 3
_CLASS = np.full(128, _OTHER, dtype=np.uint8)  # an ASCII character's class in GPT-2's pattern
_CLASS[ord("A") : ord("Z") + 1] = _CLASS[ord("a") : ord("z") + 1] = _LETTER
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[[ord(c) for c in ASCII_WHITESPACE]] = _SPACE_CLASS
_ONE_LETTER = np.zeros(256, dtype=bool)  # 's 't 'm 'd
_ONE_LETTER[[ord(c) for c in "stmd"]] = True


def split_ascii_bpe(text: str) -> list[str]:
    """``kind_spec("bpe").chunks.pieces.findall(text)`` for an ASCII ``text`` without ``"\\x00"``, in NumPy (about 1.6x
    faster): where each piece starts, then one ``str.split``.

    The pattern's matches on ASCII text, read as rules on the characters' classes (letters,
    digits, whitespace, others): a run of one class is a piece; a space joins the letters, digits
    or others right after it (`` ?[A-Za-z]+`` ...); a run of whitespace followed by something else
    leaves its last character to start the next match (``\\s+(?!\\S)``: alone, or with what follows
    if it is a space); an apostrophe where a match starts and ``s t m d re ve ll`` after it make a
    piece (the contractions), and letters after it start a new one. ``tests/data/test_byte_pairs.py``
    compares the result with ``findall`` on random ASCII text."""
    codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    n = codes.size
    if n == 0:
        return []
    kind = _CLASS[codes]
    start = np.zeros(n + 1, dtype=bool)  # a piece starts here
    start[0] = True
    np.not_equal(kind[1:], kind[:-1], out=start[1:n])
    space = kind == _SPACE_CLASS
    after = np.flatnonzero(space[:-1] & ~space[1:]) + 1  # something else right after whitespace
    start[after - 1] = True
    start[after[codes[after - 1] == _SPACE]] = False
    quote = np.flatnonzero((codes == ord("'")) & start[:n])
    if quote.size:
        padded = np.zeros(n + 2, dtype=np.uint8)
        padded[:n] = codes
        one, two = padded[quote + 1], padded[quote + 2]
        three = ((one == ord("r")) | (one == ord("v"))) & (two == ord("e")) | (one == ord("l")) & (two == ord("l"))
        size = np.where(three, 3, np.where(_ONE_LETTER[one], 2, 0))
        quote, size = quote[size > 0], size[size > 0]
        start[quote + 1] = False
        end = quote + size
        end = end[end < n]
        start[end[kind[end] == _LETTER]] = True
    starts = np.flatnonzero(start[1:n]) + 1
    marked = np.empty(n + starts.size, dtype=np.uint8)  # "\\x00" before every piece but the first
    shift = np.zeros(n, dtype=np.int64)
    shift[starts] = 1
    marked[np.arange(n) + np.cumsum(shift)] = codes
    marked[starts + np.arange(starts.size)] = 0
    return marked.tobytes().decode("ascii").split("\x00")


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte (``ByteLevel.alphabet()``'s order)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(0x100, 0x200))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


class BytePairs:
    """Hugging Face's byte-level BPE of many pieces at once, in NumPy: ``pairs(raw, lengths) -> (ids, counts)``
    for ``raw`` the pieces' UTF-8 bytes one after the other, ``lengths`` their byte lengths (each >= 1).

    Hugging Face (``tokenizers``' ``Word::merge_all``) starts a piece from its byte tokens and merges
    one pair at a time: of the adjacent pairs that are merges, the one of lowest rank (its place in
    the merge list), leftmost among equals; then the pairs the new token makes with its neighbours
    join the queue. Here every piece takes a *step* at a time: it merges every occurrence of its
    lowest-rank pair, left to right (in a run of a pair ``(x, x)``, every other one from the run's
    start, as the one-at-a-time order skips the occurrence that lost its left token). The two orders
    are the same when every merge's two parts are made by earlier merges (or are bytes) and each
    token is made by one merge only: a merge then makes only pairs of higher rank, so the one-at-a-
    time order takes the rest of that rank's occurrences next, left to right. :meth:`of` checks this
    (a tokenizer trained by ``tokenizers``' ``BpeTrainer`` meets it) and gives ``None`` otherwise.
    Pieces that are done leave the arrays, so a step costs what the unfinished pieces hold.
    ``tests/data/test_fast_encoder.py`` compares the ids with Hugging Face's.
    """

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], *, dense: int = 2048) -> None:
        size = max(vocab.values()) + 1
        left = np.array([vocab[a] for a, _ in merges], dtype=np.int64)
        right = np.array([vocab[b] for _, b in merges], dtype=np.int64)
        self._made = np.array([vocab[a + b] for a, b in merges], dtype=np.int64)  # rank -> token
        self._bytes = np.array([vocab[c] for c in _byte_chars()], dtype=np.int64)  # byte -> token
        self._none = len(merges)  # the rank of a pair that is not a merge
        # Rank of a pair: a table for the pairs of the first ``dense`` ids, else a sorted search.
        self._dense = dense = min(dense, size)
        small = (left < dense) & (right < dense)
        self._table = np.full(dense * dense, self._none, dtype=np.int64)
        self._table[left[small] * dense + right[small]] = np.flatnonzero(small)
        self._size = size
        keys = left * size + right
        order = np.argsort(keys)
        self._keys = np.append(keys[order], np.iinfo(np.int64).max)  # a sentinel past every key
        self._key_rank = np.append(order, self._none)

    @classmethod
    def of(cls, spec: dict) -> BytePairs | None:
        """For a ``tokenizers`` JSON ``spec`` of a byte-level BPE whose result the steps reproduce
        (see the class docstring); ``None`` for any other."""
        model = spec.get("model") or {}
        if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback"):
            return None
        if model.get("ignore_merges") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            return None
        vocab: dict[str, int] = model.get("vocab") or {}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges") or []]
        if not all(c in vocab for c in _byte_chars()) or any(len(m) != 2 for m in merges):
            return None
        made = set(_byte_chars())  # the tokens made so far, merge by merge
        for a, b in merges:
            if a not in made or b not in made or a + b in made or a + b not in vocab:
                return None  # a part not made by an earlier merge; a token made twice; an unknown token
            made.add(a + b)
        return cls(vocab, cast("list[tuple[str, str]]", merges))  # pairs: checked above

    def _ranks(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        dense = self._dense
        if dense == self._size:
            return self._table[left * dense + right]
        ranks = np.full(left.size, self._none, dtype=np.int64)
        small = (left < dense) & (right < dense)
        ranks[small] = self._table[left[small] * dense + right[small]]
        big = np.flatnonzero(~small)
        if big.size:
            keys = left[big] * self._size + right[big]
            at = np.searchsorted(self._keys, keys)
            ranks[big] = np.where(self._keys[at] == keys, self._key_rank[at], self._none)
        return ranks

    def __call__(self, raw: bytes, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = lengths.size
        sym = self._bytes[np.frombuffer(raw, dtype=np.uint8)]  # the current tokens of the unfinished pieces
        piece = np.repeat(np.arange(n, dtype=np.int64), lengths)  # the piece of each
        last = np.zeros(sym.size, dtype=bool)  # the last token of its piece
        last[np.cumsum(lengths) - 1] = True
        done_piece, done_sym = [], []
        while sym.size:
            ranks = np.empty(sym.size, dtype=np.int64)  # of the pair (i, i + 1)
            ranks[:-1] = self._ranks(sym[:-1], sym[1:])
            ranks[last] = self._none
            starts = np.flatnonzero(np.concatenate(([True], last[:-1])))
            lowest = np.minimum.reduceat(ranks, starts)  # each piece's lowest rank
            per = np.diff(np.append(starts, sym.size))
            live = np.repeat(lowest != self._none, per)  # its piece has a merge left
            merge = np.flatnonzero((ranks == np.repeat(lowest, per)) & live)
            run_start = np.ones(merge.size, dtype=bool)  # a run of pairs (x, x): every other one
            run_start[1:] = merge[1:] != merge[:-1] + 1
            at = np.arange(merge.size)
            merge = merge[(at - np.maximum.accumulate(np.where(run_start, at, 0))) % 2 == 0]
            sym[merge] = self._made[ranks[merge]]
            last[merge] = last[merge + 1]
            keep = np.ones(sym.size, dtype=bool)
            keep[merge + 1] = False
            done = keep & ~live
            done_piece.append(piece[done])
            done_sym.append(sym[done])
            keep &= live
            sym, piece, last = sym[keep], piece[keep], last[keep]
        pieces = np.concatenate(done_piece) if done_piece else np.empty(0, dtype=np.int64)
        ids = np.concatenate(done_sym) if done_sym else np.empty(0, dtype=np.int64)
        return ids[np.argsort(pieces, kind="stable")], np.bincount(pieces, minlength=n)
