"""The chunk encoder: many documents into one token stream, with exactly the ids of Hugging Face ``tokenizers``.

:class:`ChunkEncoder` serves the kinds whose :class:`~attnkit.text.tokenizer_kinds.KindSpec` has a
``chunks`` split (``word`` and ``bpe``; :func:`fits` says when). Their
pre-tokenizers (GPT-2's byte-level regex; :data:`attnkit.text.tokenizers.WORD_PATTERN`) run at about
1.6 MB/s in ``tokenizers``, but the ids of a piece do not depend on the text around it. So the text
is cut into *chunks* at spaces where a piece certainly starts; each distinct chunk is encoded once
and remembered across calls (a table row of ids), and the stream is gathered from the table with
NumPy. A new ASCII chunk is split into pieces as the tokenizer splits ASCII text (the kind's
``chunks.pieces``; for BPE, most of them by :func:`~attnkit.text.byte_pairs.split_ascii_bpe`, the
same split in NumPy) and each distinct piece is encoded once and remembered (a second table,
gathered from the same way): BPE's by :class:`~attnkit.text.byte_pairs.BytePairs` (Hugging Face's
byte-level BPE in NumPy, many pieces at once, the same ids),
word's by Hugging Face; any other chunk is encoded whole by Hugging Face. The new ASCII chunks of a
call that end in ``!`` to ``~`` are split in one pass over their texts joined (see
:meth:`ChunkEncoder._encode`). :func:`attnkit.data.encode.encode_batches` runs encoders in worker
processes, one per core, for the token cache of a large corpus.

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
import itertools
import json

import numpy as np

from attnkit.text.byte_pairs import BytePairs, split_ascii_bpe
from attnkit.text.tokenizer_kinds import kind_spec
from attnkit.text.tokenizers import Tokenizer

__all__ = ["SEP", "ChunkEncoder", "fits", "merge_unsafe_cuts", "safe_chunks"]

SEP = "\x00"  # joins the documents of a batch (a batch whose text holds it is encoded the plain way)
_SPACE = 0x20
_SOLID = np.zeros(256, dtype=bool)  # by byte: an ASCII character that is not whitespace (SEP too)
_SOLID[:0x80] = True
_SOLID[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, _SPACE]] = False  # \s of both patterns (not \x1c-\x1f)
_MARKS = [chr(c) for c in range(1, 32)]  # marks the safe spaces: one the text does not hold


def fits(tokenizer: Tokenizer) -> bool:
    """Whether :class:`ChunkEncoder` gives ``tokenizer``'s ids: a tokenizer of a kind with a ``chunks``
    split (``word``, ``bpe``) and the pipeline :func:`attnkit.text.tokenizers.build_tokenizer` makes
    (no normaliser, the kind's own pre-tokenizer, no post-processor, BPE without dropout, every
    added token special and read as text, ``<bos>`` and ``<eos>`` present)."""
    split = kind_spec(tokenizer.kind).chunks
    if split is None or tokenizer.bos_id is None or tokenizer.eos_id is None:
        return False
    backend = tokenizer.backend
    if not backend.encode_special_tokens or not all(t.special for t in backend.get_added_tokens_decoder().values()):
        return False
    spec = json.loads(backend.to_str())
    return split.pipeline(spec) and spec.get("normalizer") is None and spec.get("post_processor") is None


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

    # The chunk table (row -> ids) and the piece table, set by _keep and _forget_pieces.
    _flat: np.ndarray
    _offset: np.ndarray
    _count: np.ndarray
    _is_doc: np.ndarray
    _pflat: np.ndarray
    _poffset: np.ndarray
    _pcount: np.ndarray

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
        split = kind_spec(tokenizer.kind).chunks
        assert split is not None  # fits
        self._split = split.pieces.findall
        self._byte_level = split.byte_level
        self._pairs = BytePairs.of(json.loads(tokenizer.backend.to_str())) if split.byte_level else None
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
        chunks = safe_chunks(text)
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
        ASCII text is split by the kind's ``chunks.pieces`` (the tokenizer's own split on ASCII text); any other
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
        pieces = split_ascii_bpe(text) if self._byte_level else self._split(text)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        ends = np.cumsum(lengths)  # of each piece
        text_ends = np.cumsum(np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)) + 1)
        last = np.searchsorted(ends, text_ends)  # each chunk's last piece
        if ends[-1] != text_ends[-1] or not np.array_equal(ends[np.minimum(last, ends.size - 1)], text_ends):
            raise AssertionError("ChunkEncoder: a chunk is not split alone")  # cannot happen (module docstring)
        flat, counts = self._lookup(pieces)
        return flat, np.diff(np.cumsum(counts)[last], prepend=0)

    def _encode_others(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        split = self._split
        pieces: list[str] = []
        sizes: list[int] = []
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


def safe_chunks(text: str) -> list[str]:
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
        return merge_unsafe_cuts(text, text.split(" "), safe)
    codes = codes.copy()
    codes[spaces[safe]] = ord(mark)
    return codes.tobytes().decode("utf-8", "surrogatepass").split(mark)


def merge_unsafe_cuts(text: str, chunks: list[str], safe: np.ndarray) -> list[str]:
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
