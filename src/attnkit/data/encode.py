"""Fast tokenization of many documents into one token stream, with exactly the ids of Hugging Face ``tokenizers``.

:class:`ChunkEncoder` serves the ``word`` and ``bpe`` tokenizers (:func:`fits` says when). Their
pre-tokenizers (GPT-2's byte-level regex; :data:`attnkit.data.tokenizers.WORD_PATTERN`) run at about
1.6 MB/s in ``tokenizers``, but the ids of a piece do not depend on the text around it. So the text
is cut into *chunks* at spaces where a piece certainly starts; each distinct chunk is encoded once
and remembered across calls (a table row of ids), and the stream is gathered from the table with
NumPy. A new chunk's ids come from the Hugging Face tokenizer itself: an ASCII chunk is split into
pieces by :data:`PIECES` (the same split as the tokenizer's on ASCII text) and each distinct piece
is encoded by Hugging Face once and remembered (a second table, gathered from the same way); any
other chunk is encoded whole by Hugging Face. The new ASCII chunks of a call that end in ``!`` to
``~`` are split in one ``findall`` over their texts joined (see :meth:`ChunkEncoder._encode`).

Why a cut is safe: both patterns make pieces that are either runs of whitespace or hold no
whitespace except one space in front (`` ?\\p{L}+``, `` ?\\w+(?:'\\w+)*``, ...). A space right after a
printable ASCII character other than the space (``!`` to ``~``, never whitespace) therefore starts a
piece: the piece holding that character cannot take the space in. The chunk from one such space to
the next is split alone exactly as inside the text: every alternative of the patterns reads only the
characters it matches, except ``\\s+(?!\\S)``, which looks one character ahead, and a chunk never ends
in whitespace (it ends at a printable character or at the document's end). Spaces after anything
else (whitespace, a control character, a non-ASCII character) are not cut at: the chunk then runs
on. ``tests/data/test_fast_encoder.py`` compares the result with ``Tokenizer.encode`` on random
ASCII and Unicode text.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import TYPE_CHECKING

import numpy as np

from attnkit.data.tokenizers import WORD_PATTERN

if TYPE_CHECKING:
    from attnkit.data.tokenizers import Tokenizer

__all__ = ["ChunkEncoder", "fits"]

SEP = "\x00"  # joins the documents of a batch (a batch whose text holds it is encoded the plain way)
_SPACE, _FIRST, _LAST = 0x20, 0x21, 0x7E  # a space after "!".."~" starts a piece
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


class _Index(dict[str, int]):
    """chunk -> its row of the table; a chunk not seen yet gets the next free row and is listed in ``new``."""

    def __init__(self, keys: list[str] | None = None) -> None:
        super().__init__(zip(keys or [], itertools.count()))
        self.rows = len(self)  # table rows in use
        self.new: list[str] = []

    def __missing__(self, key: str) -> int:
        value = self.rows + len(self.new)
        self.new.append(key)
        self[key] = value
        return value


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
        max_chunks: int = 1 << 18,
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
        index = self._index
        rows = np.fromiter(map(index.__getitem__, chunks), dtype=np.int64, count=len(chunks))
        del chunks
        if index.new:
            self._learn(index.new)
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
        is_doc = np.fromiter((c[:1] == SEP for c in new), dtype=bool, count=len(new))
        flat, count = self._encode(new)
        self._offset = np.concatenate([self._offset, self._flat.size + np.cumsum(count) - count])
        self._flat = np.concatenate([self._flat, flat])
        self._count = np.concatenate([self._count, count])
        self._is_doc = np.concatenate([self._is_doc, is_doc])
        self._keys += new
        index.rows += len(new)
        for c in new:
            if len(c) > self.max_chunk_chars:
                del index[c]  # rarely seen again: not looked up (its row stays until the table is cut down)
        index.new = []

    def _encode(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``chunks`` (``<eos> <bos>`` and the text after SEP for a document's first chunk,
        else the ids of a space and the chunk), one after the other, and the number of ids of each.

        Each chunk is made a list of *pieces*, each piece encoded by Hugging Face once and kept in a
        second table (a piece's ids do not depend on the text around it): an ASCII text is split by
        :data:`PIECES` (the tokenizer's own split on ASCII text); any other text is one piece, encoded
        whole; a document's first chunk starts with the piece SEP, whose ids are ``<eos> <bos>``.
        The ASCII texts that start with a space and end in ``!``..``~`` (almost all) are split in one
        ``findall``, joined: there each one is preceded by ``!``..``~`` or nothing (as in its document)
        and followed by a space or nothing, so by the module's argument its first piece starts at its
        start and it is split as it is alone (its last character is not whitespace, so the one
        character read ahead is the space, where the end of the text would be, and is never taken
        in); each text's pieces are found from the pieces' lengths (``np.searchsorted``)."""
        if self._pieces.rows > self.max_chunks or self._pflat.size > self.max_ids:
            self._forget_pieces()
        joined = [i for i, c in enumerate(chunks) if "!" <= c[-1:] <= "~" and c[:1] != SEP]  # " " + c: joined
        text = " " + " ".join([chunks[i] for i in joined])
        if not text.isascii():  # only the ASCII ones
            joined = [i for i in joined if chunks[i].isascii()]
            text = " " + " ".join([chunks[i] for i in joined])
        pieces = self._split(text) if joined else []
        ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))  # of each piece
        text_ends = np.cumsum(np.fromiter((len(chunks[i]) for i in joined), dtype=np.int64, count=len(joined)) + 1)
        last = np.searchsorted(ends, text_ends)  # each text's last piece
        if joined and (
            ends[-1] != text_ends[-1] or not np.array_equal(ends[np.minimum(last, ends.size - 1)], text_ends)
        ):
            raise AssertionError("ChunkEncoder: a chunk is not split alone")  # cannot happen (module docstring)
        rest = np.ones(len(chunks), dtype=bool)
        rest[joined] = False
        others = np.flatnonzero(rest).tolist()
        split, sizes, before = self._split, [], len(pieces)
        for i in others:
            t = chunks[i][1:] if chunks[i][:1] == SEP else " " + chunks[i]
            ps = split(t) if t.isascii() else [t]  # not ASCII: one piece, encoded whole
            if chunks[i][:1] == SEP:
                ps = [SEP, *ps]
            pieces += ps
            sizes.append(len(ps))  # >= 1: SEP, or a space and more
        last = np.concatenate([last, before + np.cumsum(sizes, dtype=np.int64) - 1]) if others else last
        index = self._pieces
        rows = np.fromiter(map(index.__getitem__, pieces), dtype=np.int64, count=len(pieces))
        del pieces
        if index.new:
            flat, count = self._hf(index.new)
            self._poffset = np.concatenate([self._poffset, self._pflat.size + np.cumsum(count) - count])
            self._pcount = np.concatenate([self._pcount, count])
            self._pflat = np.concatenate([self._pflat, flat])
            index.rows += len(index.new)
            index.new = []
        counts = self._pcount[rows]
        ends = np.cumsum(counts)[last]  # in ids, the end of each chunk (joined first, then the others)
        count = np.empty(len(chunks), dtype=np.int64)
        count[joined + others] = np.diff(ends, prepend=0)
        some = counts > 0
        flat = _gather(self._pflat, self._poffset[rows[some]], counts[some])
        if joined and others:  # back to the order of chunks
            offset = np.empty(len(chunks), dtype=np.int64)
            offset[joined + others] = ends - np.diff(ends, prepend=0)
            flat = _gather(flat, offset, count)
        return flat, count

    def _forget_pieces(self) -> None:
        self._pieces = _Index([SEP])
        self._pflat = np.array([self.eos, self.bos], dtype=self.dtype)  # piece row -> ids, as the chunk table
        self._poffset = np.zeros(1, dtype=np.int64)
        self._pcount = np.full(1, 2, dtype=np.int64)

    def _hf(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Hugging Face's ids of the texts, one after the other, and the number of each (``texts`` not
        empty): one call with the texts as pre-tokenized words (the pre-tokenizer then runs on each
        alone; one Encoding instead of one per text, about twice as fast)."""
        encoding = self.tokenizer.backend.encode(texts, is_pretokenized=True, add_special_tokens=False)
        count = np.bincount(np.asarray(encoding.word_ids, dtype=np.int64), minlength=len(texts))
        return np.asarray(encoding.ids, dtype=self.dtype), count

    def _plain(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = self.tokenizer.encode_batch(docs, add_bos=True, add_eos=True)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype, count=int(lengths.sum()))
        return tokens, lengths


def _gather(flat: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``flat[offsets[0] : offsets[0] + counts[0]]``, then the next row's, ... in one array (every
    count >= 1): the indices are a cumsum of +1 steps within a row and a jump at each row's start."""
    ends = np.cumsum(counts)
    step = np.ones(int(ends[-1]), dtype=np.int64)
    step[0] = offsets[0]
    step[ends[:-1]] = offsets[1:] - offsets[:-1] - counts[:-1] + 1
    return flat[np.cumsum(step)]


def _chunks(text: str) -> list[str]:
    """``text`` cut at every space that is a safe cut (the space left out): after ``!``..``~``; after SEP
    (a document's first character is a space); before SEP (the space that joins two documents). The
    safe spaces are marked with a character the text does not hold and the text split at it (if it
    holds every candidate: split at every space and the chunks around the other spaces joined again)."""
    # In UTF-8 a byte below 0x80 is always an ASCII character: a space, SEP or ``!``..``~`` is found as in the text.
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    spaces = np.flatnonzero(codes == _SPACE)  # never 0
    if spaces.size == 0:
        return [text]
    before = codes[spaces - 1]
    after = codes[np.minimum(spaces + 1, codes.size - 1)]  # the last character: a space, not SEP
    safe = ((before >= _FIRST) & (before <= _LAST)) | (before == 0) | (after == 0)
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
