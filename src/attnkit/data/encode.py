"""Fast tokenization of many documents into one token stream, with exactly the ids of Hugging Face ``tokenizers``.

:class:`ChunkEncoder` serves the ``word`` and ``bpe`` tokenizers (:func:`fits` says when). Their
pre-tokenizers (GPT-2's byte-level regex; :data:`attnkit.data.tokenizers.WORD_PATTERN`) run at about
1.6 MB/s in ``tokenizers``, but the ids of a piece do not depend on the text around it. So the text
is cut into *chunks* at spaces where a piece certainly starts; each distinct chunk is encoded once
and remembered across calls (a table row of ids), and the stream is gathered from the table with
NumPy. A new ASCII chunk is split into pieces as the tokenizer splits ASCII text (:data:`PIECES`;
for BPE, most of them by :func:`split_ascii_bpe`, the same split in NumPy) and each distinct piece is
encoded once and remembered (a second table, gathered from the same way): BPE's by
:class:`BytePairs` (Hugging Face's byte-level BPE in NumPy, many pieces at once, the same ids),
word's by Hugging Face; any other chunk is encoded whole by Hugging Face. The new ASCII chunks of a
call that end in ``!`` to ``~`` are split in one pass over their texts joined (see
:meth:`ChunkEncoder._encode`). :func:`encode_batches` runs encoders in worker processes, one per
core, for the token cache of a large corpus.

Why a cut is safe: both patterns make pieces that are either runs of whitespace or hold no
whitespace except one space in front (`` ?\\p{L}+``, `` ?\\w+(?:'\\w+)*``, ...). So a space starts a
piece (1) right after a character that is not whitespace: the piece holding that character cannot
take the space in; and (2) right before a character that is not whitespace: else the space is in a
run of whitespace begun before it (only a space can be a piece's front); at the run's first
character no other alternative matches, and ``\\s+(?!\\S)`` does, giving the run back up to, not
including, the space (it cannot end at the next character, which is not whitespace). Cuts are made at
such spaces only where the character that decides it is ASCII (to Hugging Face, non-ASCII characters
such as U+00A0 are whitespace too). The chunk from one cut to the next is split alone exactly as
inside the text: an alternative that matches alone matches the same characters in the text, the
only character read past a chunk is by ``(?!\\S)`` at its end, which sees the next cut's space in
the text and the end of the text alone, and both are not ``\\S``; the greedy choices are then the
same, since a piece ends at the chunk's end in the text. Other spaces (between whitespace, or next
to a non-ASCII character and whitespace) are not cut at: the chunk then runs on.
``tests/data/test_fast_encoder.py`` compares the result with ``Tokenizer.encode`` on random ASCII
and Unicode text; ``tests/data/test_byte_pairs.py`` the split and BPE steps with the regex's and
Hugging Face's.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import multiprocessing
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

from attnkit.data.cache import token_dtype
from attnkit.data.tokenizer_kinds import WORD_PATTERN
from attnkit.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, tokenizer_from_dict

__all__ = ["BytePairs", "ChunkEncoder", "encode_batches", "fast_encoder", "fits", "tokenize_workers"]

Encoded = tuple[np.ndarray, np.ndarray]  # (tokens, lengths) of a list of documents

SEP = "\x00"  # joins the documents of a batch (a batch whose text holds it is encoded the plain way)
_SPACE = 0x20
_SOLID = np.zeros(256, dtype=bool)  # by byte: an ASCII character that is not whitespace (SEP too)
_SOLID[:0x80] = True
_SOLID[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, _SPACE]] = False  # \s of both patterns (not \x1c-\x1f)
_MARKS = [chr(c) for c in range(1, 32)]  # marks the safe spaces: one the text does not hold
_WS = r"\t\n\x0b\x0c\r "  # \s of Oniguruma (Hugging Face's regex engine) on ASCII text: not \x1c-\x1f
#: The pre-tokenizers' patterns on ASCII text, for Python's re: GPT-2's (``\p{L}`` = ``[A-Za-z]``,
#: ``\p{N}`` = ``[0-9]``) and WORD_PATTERN (re.ASCII: ``\w`` = ``[A-Za-z0-9_]``, ``\s`` = the same six).
PIECES = {
    "bpe": re.compile(
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
    ),
    "word": re.compile(WORD_PATTERN, re.ASCII),
}
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
_WORD_SPLIT = {"type": "Split", "pattern": {"Regex": WORD_PATTERN}, "behavior": "Isolated", "invert": False}


def fits(tokenizer: Tokenizer) -> bool:
    """Whether :class:`ChunkEncoder` gives ``tokenizer``'s ids: a ``word`` or ``bpe`` tokenizer with the
    pipeline :func:`attnkit.data.tokenizers.build_tokenizer` makes (no normaliser, the kind's own
    pre-tokenizer, no post-processor, BPE without dropout, every added token special and read as
    text, ``<bos>`` and ``<eos>`` present)."""
    if tokenizer.kind not in ("word", "bpe") or tokenizer.bos_id is None or tokenizer.eos_id is None:
        return False
    backend = tokenizer.backend
    if not backend.encode_special_tokens or not all(t.special for t in backend.get_added_tokens_decoder().values()):
        return False
    spec = json.loads(backend.to_str())
    pre = spec.get("pre_tokenizer") or {}
    if tokenizer.kind == "bpe":
        pre_ok = {k: pre.get(k) for k in _BYTE_LEVEL} == _BYTE_LEVEL
        model_ok = spec["model"].get("type") == "BPE" and not spec["model"].get("dropout")
    else:
        pre_ok = pre == _WORD_SPLIT
        model_ok = spec["model"].get("type") == "WordLevel"
    return pre_ok and model_ok and spec.get("normalizer") is None and spec.get("post_processor") is None


_OTHER, _LETTER, _DIGIT, _SPACE_CLASS = 0, 1, 2, 3
_CLASS = np.full(128, _OTHER, dtype=np.uint8)  # an ASCII character's class in GPT-2's pattern
_CLASS[ord("A") : ord("Z") + 1] = _CLASS[ord("a") : ord("z") + 1] = _LETTER
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[[ord(c) for c in _WS.encode().decode("unicode_escape")]] = _SPACE_CLASS
_ONE_LETTER = np.zeros(256, dtype=bool)  # 's 't 'm 'd
_ONE_LETTER[[ord(c) for c in "stmd"]] = True


def split_ascii_bpe(text: str) -> list[str]:
    """``PIECES["bpe"].findall(text)`` for an ASCII ``text`` without ``"\\x00"``, in NumPy (about 1.6x
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
        return cls(vocab, merges)  # type: ignore[arg-type]

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


class _Index(collections.defaultdict[str, int]):
    """key -> its row of a table; a key not held yet gets the next free row (in C, no Python call).
    ``rows``: the table's rows in use (keys may have been removed since)."""

    def __init__(self, keys: list[str] | None = None) -> None:
        keys = keys or []
        super().__init__(itertools.count(len(keys)).__next__, zip(keys, itertools.count()))
        self.rows = len(self)

    def rows_of(self, keys: list[str]) -> tuple[np.ndarray, list[str]]:
        """Each key's row, and the keys that were not held (their rows are ``rows`` on, in order;
        ``rows`` is not advanced: the caller adds them to its table, then does)."""
        before = len(self)
        rows = np.fromiter(map(self.__getitem__, keys), dtype=np.int64, count=len(keys))
        return rows, list(itertools.islice(reversed(self), len(self) - before))[::-1]


class ChunkEncoder:
    """``encoder(docs) -> (tokens, lengths)``: each document as ``<bos> ids <eos>``, concatenated
    (``dtype``), and the length of each; the ids are ``tokenizer.encode(doc, add_bos=True, add_eos=True)``.

    Chunks are remembered across calls, each as a row of a table. When the table holds more than
    ``max_chunks`` rows or ``max_ids`` ids after a call, it keeps only the rows that call used (or
    none, if they are over half the limit); chunks longer than ``max_chunk_chars`` characters are not
    looked up again after their call. Pieces (:meth:`_encode`) are forgotten past ``max_chunks``.
    Only for tokenizers that :func:`fits` accepts.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        dtype: np.dtype,
        *,
        max_chunks: int = 1 << 20,
        max_ids: int = 1 << 22,
        max_chunk_chars: int = 64,
    ) -> None:
        if not fits(tokenizer):
            raise ValueError(f"ChunkEncoder: this {tokenizer.kind!r} tokenizer's pipeline is not one it handles")
        self.tokenizer = tokenizer
        self.dtype = np.dtype(dtype)
        self.max_chunks, self.max_ids, self.max_chunk_chars = max_chunks, max_ids, max_chunk_chars
        self.bos, self.eos = int(tokenizer.bos_id), int(tokenizer.eos_id)
        self._split = PIECES[tokenizer.kind].findall
        self._pairs = BytePairs.of(json.loads(tokenizer.backend.to_str())) if tokenizer.kind == "bpe" else None
        self._forget_pieces()
        self._keep([], np.empty(0, dtype=np.int64))

    def _keep(self, keys: list[str], rows: np.ndarray) -> None:
        """Make the table ``rows`` of the current one (in this order), known as ``keys``."""
        self._index = _Index(keys)
        self._keys = keys  # row -> chunk
        count = self._count[rows] if rows.size else np.empty(0, dtype=np.int64)
        self._flat = _gather(self._flat, self._offset[rows], count) if rows.size else np.empty(0, dtype=self.dtype)
        self._offset = np.cumsum(count) - count  # where each row starts in _flat (the rows' ids, one after the other)
        self._count = count  # its number of ids (>= 1: a chunk is never empty text)
        self._is_doc = self._is_doc[rows] if rows.size else np.empty(0, dtype=bool)  # row: <eos> <bos> ids

    def __call__(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not docs:
            return np.empty(0, dtype=self.dtype), np.empty(0, dtype=np.int64)
        # Every document starts with SEP; the space before it is not text (always cut at).
        text = SEP + f" {SEP}".join(docs)
        if text.count(SEP) != len(docs):  # a document holds SEP itself
            return self._plain(docs)
        chunks = _chunks(text)
        rows, new = self._index.rows_of(chunks)
        del chunks
        if new:
            self._learn(new)
        # The rows' ids in order: <eos> <bos> document 0, <eos> <bos> document 1, ...
        counts = self._count[rows]
        stream = _gather(self._flat, self._offset[rows], counts)
        tokens = np.empty_like(stream)
        tokens[:-1] = stream[1:]  # less the first <eos>, with one at the end
        tokens[-1] = self.eos
        starts = (np.cumsum(counts) - counts)[self._is_doc[rows]]  # each <bos>, in tokens
        if starts.size != len(docs):
            raise AssertionError("ChunkEncoder: document boundaries lost")  # cannot happen: SEP is not text
        if self._index.rows > self.max_chunks or self._flat.size > self.max_ids:
            used = np.unique(rows)
            if used.size > self.max_chunks // 2:
                used = used[:0]
            keys = [self._keys[r] for r in used.tolist()]
            short = np.fromiter((len(k) <= self.max_chunk_chars for k in keys), dtype=bool, count=len(keys))
            self._keep([k for k, ok in zip(keys, short.tolist(), strict=True) if ok], used[short])
        return tokens, np.diff(starts, append=tokens.size)

    def _learn(self, new: list[str]) -> None:
        """Encode the chunks first seen in this call and add their rows (:meth:`_encode`)."""
        index = self._index
        is_doc = np.fromiter(map(str.startswith, new, itertools.repeat(SEP)), dtype=bool, count=len(new))
        flat, count = self._encode(new)
        self._offset = np.concatenate([self._offset, self._flat.size + np.cumsum(count) - count])
        self._flat = np.concatenate([self._flat, flat])
        self._count = np.concatenate([self._count, count])
        self._is_doc = np.concatenate([self._is_doc, is_doc])
        self._keys += new
        index.rows += len(new)
        lengths = np.fromiter(map(len, new), dtype=np.int64, count=len(new))
        for i in np.flatnonzero(lengths > self.max_chunk_chars).tolist():
            del index[new[i]]  # rarely seen again: not looked up (its row stays until the table is cut down)

    def _encode(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``chunks`` (``<eos> <bos>`` and the text after SEP for a document's first chunk,
        else the ids of a space and the chunk), one after the other, and the number of ids of each.

        Each chunk is made a list of *pieces*, whose ids do not depend on the text around them: an
        ASCII text is split by :data:`PIECES` (the tokenizer's own split on ASCII text); any other
        text is one piece, encoded whole; a document's first chunk starts with the piece SEP, whose
        ids are ``<eos> <bos>``. The ASCII texts that start with a space and end in ``!``..``~``
        (almost all) are split in one ``findall``, joined: there each one is preceded by ``!``..``~``
        or nothing (as in its document) and followed by a space or nothing, so by the module's
        argument its first piece starts at its start and it is split as it is alone (its last
        character is not whitespace, so the one character read ahead is the space, where the end of
        the text would be, and is never taken in); each text's pieces are found from the pieces'
        lengths (``np.searchsorted``). Each distinct piece is encoded once and kept in a second
        table (:meth:`_lookup`)."""
        if self._pieces.rows > self.max_chunks or self._pflat.size > self.max_ids:
            self._forget_pieces()
        joined = [i for i, c in enumerate(chunks) if "!" <= c[-1:] <= "~" and c[:1] != SEP]  # " " + c: joined
        text = " " + " ".join([chunks[i] for i in joined])
        if not text.isascii():  # only the ASCII ones
            joined = [i for i in joined if chunks[i].isascii()]
            text = " " + " ".join([chunks[i] for i in joined])
        rest = np.ones(len(chunks), dtype=bool)
        rest[joined] = False
        others = np.flatnonzero(rest).tolist()
        parts = []  # (flat, count) of the joined chunks, then of the others
        if joined:
            parts.append(self._encode_joined(text, [chunks[i] for i in joined]))
        if others:
            parts.append(self._encode_others([chunks[i] for i in others]))
        if len(parts) == 1:
            return parts[0]
        return _in_order(len(chunks), [(joined, *parts[0]), (others, *parts[1])])

    def _encode_joined(self, text: str, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``text`` is ``" " + " ".join(chunks)`` (see :meth:`_encode`)."""
        pieces = split_ascii_bpe(text) if self.tokenizer.kind == "bpe" else self._split(text)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        ends = np.cumsum(lengths)  # of each piece
        text_ends = np.cumsum(np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)) + 1)
        last = np.searchsorted(ends, text_ends)  # each chunk's last piece
        if ends[-1] != text_ends[-1] or not np.array_equal(ends[np.minimum(last, ends.size - 1)], text_ends):
            raise AssertionError("ChunkEncoder: a chunk is not split alone")  # cannot happen (module docstring)
        flat, counts = self._lookup(pieces)
        return flat, np.diff(np.cumsum(counts)[last], prepend=0)

    def _encode_others(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        split, pieces, sizes = self._split, [], []
        for c in chunks:
            t = c[1:] if c[:1] == SEP else " " + c
            ps = split(t) if t.isascii() else [t]  # not ASCII: one piece, encoded whole
            if c[:1] == SEP:
                ps = [SEP, *ps]
            pieces += ps
            sizes.append(len(ps))  # >= 1: SEP, or a space and more
        flat, counts = self._lookup(pieces)
        return flat, np.diff(np.cumsum(counts)[np.cumsum(sizes, dtype=np.int64) - 1], prepend=0)

    def _lookup(self, pieces: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``pieces`` from the piece table (new ones encoded by :meth:`_hf` and added), one
        after the other, and the number of each (0 for an empty piece)."""
        rows, new = self._pieces.rows_of(pieces)
        if new:
            flat, count = self._hf(new)
            self._poffset = np.concatenate([self._poffset, self._pflat.size + np.cumsum(count) - count])
            self._pcount = np.concatenate([self._pcount, count])
            self._pflat = np.concatenate([self._pflat, flat])
            self._pieces.rows += len(new)
        counts = self._pcount[rows]
        some = counts > 0
        if not some.any():
            return self._pflat[:0], counts
        return _gather(self._pflat, self._poffset[rows[some]], counts[some]), counts

    def _forget_pieces(self) -> None:
        self._pieces = _Index([SEP])
        self._pflat = np.array([self.eos, self.bos], dtype=self.dtype)  # piece row -> ids, as the chunk table
        self._poffset = np.zeros(1, dtype=np.int64)
        self._pcount = np.full(1, 2, dtype=np.int64)

    def _hf(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Hugging Face's ids of the texts (new pieces, not empty), one after the other, and the number
        of each. BPE's ASCII pieces, already split as the tokenizer splits: :class:`BytePairs` (about
        4x faster on real text); the others through Hugging Face in one call, the texts given as
        pre-tokenized words (its pre-tokenizer then splits each alone; one Encoding instead of one
        per text, about twice as fast)."""
        if self._pairs is None:
            return self._hf_words(texts)
        ascii_ = np.fromiter(map(str.isascii, texts), dtype=bool, count=len(texts))
        if ascii_.all():
            return self._by_pairs(texts)
        if not ascii_.any():
            return self._hf_words(texts)
        some = np.flatnonzero(ascii_).tolist()
        rest = np.flatnonzero(~ascii_).tolist()
        by_pairs = self._by_pairs([texts[i] for i in some])
        return _in_order(len(texts), [(some, *by_pairs), (rest, *self._hf_words([texts[i] for i in rest]))])

    def _by_pairs(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        assert self._pairs is not None
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))  # ASCII: bytes
        ids, count = self._pairs("".join(texts).encode("ascii"), lengths)
        return ids.astype(self.dtype), count

    def _hf_words(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoding = self.tokenizer.backend.encode(texts, is_pretokenized=True, add_special_tokens=False)
        count = np.bincount(np.asarray(encoding.word_ids, dtype=np.int64), minlength=len(texts))
        return np.asarray(encoding.ids, dtype=self.dtype), count

    def _plain(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = self.tokenizer.encode_batch(docs, add_bos=True, add_eos=True)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype, count=int(lengths.sum()))
        return tokens, lengths


def _in_order(n: int, groups: list[tuple[list[int], np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(flat, count)`` of ``n`` items encoded in groups, each ``(indices, flat, count)`` (the ids of
    its items one after the other and the number of each), back in the items' order."""
    count = np.zeros(n, dtype=np.int64)
    offset = np.zeros(n, dtype=np.int64)  # where each item starts in the groups' flats, joined
    done = 0
    for indices, flat, counts in groups:
        count[indices] = counts
        offset[indices] = done + np.cumsum(counts) - counts
        done += flat.size
    flat = np.concatenate([g[1] for g in groups])
    some = count > 0
    return (_gather(flat, offset[some], count[some]) if some.any() else flat[:0]), count


def _gather(flat: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``flat[offsets[0] : offsets[0] + counts[0]]``, then the next row's, ... in one array (every
    count >= 1): the indices are a cumsum of +1 steps within a row and a jump at each row's start."""
    ends = np.cumsum(counts)
    step = np.ones(int(ends[-1]), dtype=np.int64)
    step[0] = offsets[0]
    step[ends[:-1]] = offsets[1:] - offsets[:-1] - counts[:-1] + 1
    return flat[np.cumsum(step)]


def _chunks(text: str) -> list[str]:
    """``text`` cut at every space that is a safe cut (the space left out; see the module docstring):
    after or before an ASCII character that is not whitespace (SEP too: a document's first character
    is a space; the space before it joins two documents). The safe spaces are marked with a
    character the text does not hold and the text split at it (if it holds every candidate: split at
    every space and the chunks around the other spaces joined again)."""
    # In UTF-8 a byte below 0x80 is always an ASCII character: the ones looked at are found as in the text.
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    spaces = np.flatnonzero(codes == _SPACE)  # never 0
    if spaces.size == 0:
        return [text]
    before = codes[spaces - 1]
    after = codes[np.minimum(spaces + 1, codes.size - 1)]  # the last character: a space, not SEP
    safe = _SOLID[before] | _SOLID[after]
    if safe.all():
        return text.split(" ")
    mark = next((m for m in _MARKS if m not in text), None)
    if mark is None:
        return _merge_unsafe_cuts(text, text.split(" "), safe)
    codes = codes.copy()
    codes[spaces[safe]] = ord(mark)
    return codes.tobytes().decode("utf-8", "surrogatepass").split(mark)


def _merge_unsafe_cuts(text: str, chunks: list[str], safe: np.ndarray) -> list[str]:
    """``chunks`` (``text.split(" ")``) with the chunks around every space that is not ``safe`` joined again."""
    unsafe = np.flatnonzero(~safe)
    breaks = np.flatnonzero(np.diff(unsafe) != 1)
    firsts = unsafe[np.concatenate([[0], breaks + 1])].tolist()
    lasts = unsafe[np.concatenate([breaks, [unsafe.size - 1]])].tolist()
    out: list[str] = []
    done = 0
    for first, last in zip(firsts, lasts, strict=True):  # spaces first..last join chunks first..last + 1
        out.extend(chunks[done:first])
        out.append(" ".join(chunks[first : last + 2]))
        done = last + 2
    out.extend(chunks[done:])
    return out


# ====================================================================== the token cache's encoder
def fast_encoder(tokenizer: Tokenizer) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    """``docs -> (tokens, lengths)``: each document as ``<bos> ids <eos>``, concatenated (the token
    cache's dtype), and the number of ids of each (``int64``).

    ``char``: a vectorised lookup of the code points (the same ids as ``tokenizer.encode``, tested;
    splitting into characters through the tokenizers library runs at well under 1 MB/s). ``word``
    and ``bpe`` (as :func:`build_tokenizer` makes them): :class:`attnkit.data.encode.ChunkEncoder`
    (each distinct chunk of text encoded once by Hugging Face, remembered across calls; the same
    ids, tested). Others: Hugging Face ``encode_batch`` (parallel threads)."""
    dtype = token_dtype(tokenizer.vocab_size)
    if fits(tokenizer):
        return ChunkEncoder(tokenizer, dtype)
    if tokenizer.kind == "char":
        table = np.full(0x110000, UNK_ID, dtype=dtype)
        for i, token in enumerate(tokenizer.vocab):
            if i not in (PAD_ID, BOS_ID, EOS_ID, UNK_ID) and len(token) == 1:
                table[ord(token)] = i

        def encode(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
            lengths = np.fromiter((len(d) + 2 for d in docs), dtype=np.int64, count=len(docs))
            points = np.frombuffer("".join(docs).encode("utf-32-le"), dtype=np.uint32)
            out = np.empty(int(lengths.sum()), dtype=dtype)
            ends = np.cumsum(lengths)
            starts = ends - lengths
            out[starts] = BOS_ID
            out[ends - 1] = EOS_ID
            body = np.ones(out.size, dtype=bool)
            body[starts] = False
            body[ends - 1] = False
            out[body] = table[points]
            return out, lengths

        return encode

    def encode_hf(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = tokenizer.encode_batch(docs, add_bos=True, add_eos=True)
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum())), lengths

    return encode_hf


#: Text below this many bytes is tokenized in the calling process (starting workers would cost more).
PARALLEL_BYTES = 8 << 20


def tokenize_workers(requested: int | None, tokenizer: Tokenizer, nbytes: int) -> int:
    """How many processes tokenize ``nbytes`` of text for the token cache: ``requested`` if given;
    else one per CPU core this process may use for ``word``, ``bpe`` and pretrained tokenizers on
    text of at least :data:`PARALLEL_BYTES` (``char`` is a vectorised lookup, faster than the
    workers' transfers), else 1 (this process)."""
    if requested is not None:
        return max(1, requested)
    if tokenizer.kind == "char" or nbytes < PARALLEL_BYTES:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def encode_batches(
    tokenizer: Tokenizer, batches: Iterable[list[list[str]]], workers: int = 1, *, ahead: int = 2
) -> Iterator[tuple[list[list[str]], list[Encoded]]]:
    """``(batch, [fast_encoder(tokenizer)(docs) for docs in batch])`` for each batch (a list of lists
    of documents), in order.

    ``workers > 1``: the batches are encoded in that many worker processes, each with its own
    :func:`fast_encoder` (so a :class:`ChunkEncoder` remembers the chunks of the batches it saw);
    at most ``ahead`` batches per worker are in flight, so memory does not grow with the input.
    Workers are forked where the platform can (nothing to import again), else spawned. A worker's
    error is raised here; a worker that dies (e.g. killed for memory) raises
    ``concurrent.futures.process.BrokenProcessPool``. A daemon process (which may not start
    processes) encodes in itself."""
    if workers <= 1 or multiprocessing.current_process().daemon:
        encode = fast_encoder(tokenizer)
        for batch in batches:
            yield batch, [encode(docs) for docs in batch]
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context(method),
        initializer=_start_worker,
        initargs=(tokenizer.to_dict(),),
    )
    pending: deque[tuple[list[list[str]], Future]] = deque()
    try:
        for batch in batches:
            if pending:
                pending.append((batch, pool.submit(_encode_in_worker, batch)))
            else:  # the first submit starts the workers
                with _tokenizers_parallelism_set():
                    pending.append((batch, pool.submit(_encode_in_worker, batch)))
            if len(pending) > workers * ahead:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _tokenizers_parallelism_set() -> Iterator[None]:
    """``TOKENIZERS_PARALLELISM`` set while workers are forked: a process forked after Hugging Face
    ``tokenizers`` used its thread pool (training BPE does) prints a warning unless it is set. The
    workers encode in one thread each either way."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    if before is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


_worker_encode: Callable[[list[str]], Encoded] | None = None


def _start_worker(spec: dict[str, Any]) -> None:
    global _worker_encode
    _worker_encode = fast_encoder(tokenizer_from_dict(spec))


def _encode_in_worker(batch: list[list[str]]) -> list[Encoded]:
    assert _worker_encode is not None, "encode_batches: worker not started"
    return [_worker_encode(docs) for docs in batch]
