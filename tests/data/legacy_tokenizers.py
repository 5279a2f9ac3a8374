"""Tokenizers: a word tokenizer for classification, and char / word / BPE tokenizers for generation.

No download: every vocabulary is built from the user's (training) texts.

* :class:`WordTokenizer` (text classification): lower-cased words, ids ``0`` ``<pad>`` and ``1`` ``<unk>``.
* Generation and translation tokenizers (:class:`CharTokenizer`, :class:`WordLevelTokenizer`,
  :class:`BPETokenizer`; build one with :func:`build_tokenizer`) share the interface of
  :class:`Tokenizer` and fixed special ids: ``PAD_ID = 0`` ``<pad>``, ``BOS_ID = 1`` ``<bos>``,
  ``EOS_ID = 2`` ``<eos>``, ``UNK_ID = 3`` ``<unk>``. They keep case and spacing, so that
  ``decode(encode(text)) == text`` (exactly what round-trips is said per class). ``to_dict()`` is
  JSON-serialisable (stored in checkpoints); :func:`tokenizer_from_dict` rebuilds the tokenizer.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

__all__ = [
    "BOS",
    "BOS_ID",
    "EOS",
    "EOS_ID",
    "PAD",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK",
    "UNK_ID",
    "BPETokenizer",
    "CharTokenizer",
    "StreamDecoder",
    "Tokenizer",
    "TokenizerKind",
    "WordLevelTokenizer",
    "WordTokenizer",
    "build_tokenizer",
    "tokenizer_from_dict",
]

PAD = "<pad>"
UNK = "<unk>"
BOS = "<bos>"
EOS = "<eos>"
# Fixed ids of the generation/translation tokenizers (not of the classification WordTokenizer).
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)  # in id order

# IMDB reviews contain literal HTML line breaks: "<br />", "<br/>", "<br>".
_BR_RE = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)
# A word (letters/digits/underscore, with inner apostrophes such as "don't") or one punctuation mark.
_TOKEN_RE = re.compile(r"\w+(?:'\w+)*|[^\w\s]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})


class _VocabLookup:
    """Lookups of a tokenizer that holds its vocabulary as ``_itos`` (tokens in id order) and
    ``_stoi`` (token -> id); tokens outside it map to ``unk_id``."""

    _itos: list[str]
    _stoi: dict[str, int]
    unk_id: int

    def token_to_id(self, token: str) -> int:
        """Id of ``token`` (``unk_id`` when it is not in the vocabulary)."""
        return self._stoi.get(token, self.unk_id)

    def id_to_token(self, i: int) -> str:
        """Token of id ``i``."""
        return self._itos[i]

    @property
    def vocab(self) -> list[str]:
        """Tokens in id order (a copy)."""
        return list(self._itos)

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi


class WordTokenizer(_VocabLookup):
    """Lower-cases, strips ``<br />`` tags and splits into words and punctuation marks.

    ``"I didn't like it.<br /><br />Really!"`` -> ``["i", "didn't", "like", "it", ".", "really", "!"]``.
    Words inside the vocabulary map to their id, others to :attr:`unk_id`.

    Args:
        vocab: tokens in id order; ``vocab[0]`` must be ``"<pad>"`` and ``vocab[1]`` ``"<unk>"``.
    """

    pad_id: int = 0
    unk_id: int = 1
    FORMAT = "attnkit.word_tokenizer"
    VERSION = 1

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if len(vocab) < 2 or vocab[0] != PAD or vocab[1] != UNK:
            raise ValueError(f"WordTokenizer: vocab must start with [{PAD!r}, {UNK!r}], got {vocab[:2]!r}")
        bad = [t for t in vocab if not isinstance(t, str) or not t]
        if bad:
            raise ValueError(f"WordTokenizer: vocab entries must be non-empty strings, got {bad[:5]!r}")
        if len(set(vocab)) != len(vocab):
            dupes = sorted(t for t, c in Counter(vocab).items() if c > 1)
            raise ValueError(f"WordTokenizer: duplicate vocab entries {dupes[:5]!r}")
        self._itos: list[str] = vocab
        self._stoi: dict[str, int] = {t: i for i, t in enumerate(vocab)}

    # ------------------------------------------------------------------ building
    @staticmethod
    def tokenize(text: str) -> list[str]:
        """Split ``text`` into lower-cased words and punctuation marks (``<br />`` tags removed)."""
        if not isinstance(text, str):
            raise TypeError(f"WordTokenizer.tokenize expects a str, got {type(text).__name__}")
        text = _BR_RE.sub(" ", text).translate(_APOSTROPHES).lower()
        return _TOKEN_RE.findall(text)

    @classmethod
    def build(cls, texts: Iterable[str], *, max_size: int = 20000, min_freq: int = 2) -> WordTokenizer:
        """Vocabulary of the most frequent tokens of ``texts``.

        Args:
            texts: the corpus (normally the training split only).
            max_size: total vocabulary size *including* ``<pad>`` and ``<unk>`` (so at most
                ``max_size - 2`` words).
            min_freq: tokens seen fewer times are left out (they encode to ``<unk>``).

        Tokens are ordered by decreasing count, ties broken alphabetically, so the result is the
        same for the same corpus whatever the order of the texts.
        """
        if isinstance(texts, str):
            raise TypeError("WordTokenizer.build expects an iterable of texts, got a single str")
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 2:
            raise ValueError(f"WordTokenizer.build: max_size must be an int >= 2 (pad + unk), got {max_size!r}")
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"WordTokenizer.build: min_freq must be an int >= 1, got {min_freq!r}")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls.tokenize(text))
        for special in (PAD, UNK):
            counts.pop(special, None)
        ranked = sorted((item for item in counts.items() if item[1] >= min_freq), key=lambda kv: (-kv[1], kv[0]))
        words = [w for w, _ in ranked[: max_size - 2]]
        return cls([PAD, UNK, *words])

    # ------------------------------------------------------------------ coding
    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Token ids of ``text`` (length ``<= max_len`` when given: the text is truncated at the end)."""
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
            raise ValueError(f"WordTokenizer.encode: max_len must be None or an int >= 1, got {max_len!r}")
        tokens = self.tokenize(text)
        if max_len is not None:
            tokens = tokens[:max_len]
        unk = self.unk_id
        return [self._stoi.get(t, unk) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        """Tokens of ``ids`` joined by spaces; ``<pad>`` is skipped, unknown words show as ``<unk>``."""
        n = len(self._itos)
        out: list[str] = []
        for i in ids:
            i = int(i)
            if i == self.pad_id:
                continue
            if not 0 <= i < n:
                raise ValueError(f"WordTokenizer.decode: id {i} out of range [0, {n})")
            out.append(self._itos[i])
        return " ".join(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordTokenizer) and self._itos == other._itos

    def __hash__(self) -> int:
        return hash(tuple(self._itos))

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description; :meth:`from_dict` rebuilds an equal tokenizer."""
        return {"format": self.FORMAT, "version": self.VERSION, "vocab": list(self._itos)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WordTokenizer:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(d, dict):
            raise TypeError(f"WordTokenizer.from_dict expects a dict, got {type(d).__name__}")
        if d.get("format") != cls.FORMAT:
            raise ValueError(f"WordTokenizer.from_dict: format must be {cls.FORMAT!r}, got {d.get('format')!r}")
        if d.get("version") != cls.VERSION:
            raise ValueError(
                f"WordTokenizer.from_dict: unsupported version {d.get('version')!r} (supported: {cls.VERSION})"
            )
        vocab = d.get("vocab")
        if not isinstance(vocab, list):
            raise ValueError(f"WordTokenizer.from_dict: 'vocab' must be a list of strings, got {type(vocab).__name__}")
        return cls(vocab)


# ====================================================================== generation / translation tokenizers
TokenizerKind = Literal["char", "word", "bpe"]
TOKENIZER_FORMAT = "attnkit.tokenizer"
TOKENIZER_VERSION = 1

# GPT-2's split: a word (with inner apostrophes) or one punctuation mark, each with at most one
# leading space; whitespace runs otherwise (the last space of a run goes to the next word).
_PIECE_RE = re.compile(r" ?\w+(?:'\w+)*| ?[^\w\s]|\s+(?!\S)|\s+")


class Tokenizer(ABC):
    """The interface of the generation/translation tokenizers.

    Ids ``0..3`` are always ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` (:data:`PAD_ID` ...).
    Text that is not in the vocabulary encodes to ``<unk>``, never an error.

    ``decode(ids, skip_special=True)`` drops ``<pad>``, ``<bos>`` and ``<eos>`` and shows ``<unk>``
    as the text ``"<unk>"`` (it stands for real text that the vocabulary lacked, so it is kept
    visible); with ``skip_special=False`` every special token shows as its string.
    """

    kind: ClassVar[str]
    pad_id: ClassVar[int] = PAD_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID
    unk_id: ClassVar[int] = UNK_ID

    @abstractmethod
    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally with ``<bos>`` first and ``<eos>`` last."""

    @abstractmethod
    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids`` (a list of ints or a 1-D integer tensor)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, the four special tokens included."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description; :func:`tokenizer_from_dict` rebuilds an equal tokenizer."""

    def __len__(self) -> int:
        return self.vocab_size

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    # ---------------------------------------------------------------- shared helpers
    @staticmethod
    def _check_text(text: Any, where: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"{where}: expected a str, got {type(text).__name__}")
        return text

    def _ids_list(self, ids: Any, where: str) -> list[int]:
        if hasattr(ids, "tolist"):  # a tensor or a NumPy array
            ids = ids.tolist()
        if isinstance(ids, str | bytes):
            raise TypeError(f"{where}: expected a sequence of token ids, got {type(ids).__name__}")
        out = []
        n = self.vocab_size
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"{where}: token ids must be ints, got {i!r} ({type(i).__name__})")
            if not 0 <= i < n:
                raise ValueError(f"{where}: id {i} out of range [0, {n}) of this vocabulary")
            out.append(i)
        return out

    @staticmethod
    def _wrap(ids: list[int], add_bos: bool, add_eos: bool) -> list[int]:
        return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])


class _VocabTokenizer(_VocabLookup, Tokenizer):
    """A tokenizer with an explicit token list: the text is split into pieces, each piece is one
    id, and decoding concatenates the pieces."""

    def __init__(self, vocab: Sequence[str]) -> None:
        name = type(self).__name__
        if isinstance(vocab, str) or not isinstance(vocab, Sequence):
            raise TypeError(f"{name}: vocab must be a list of strings, got {type(vocab).__name__}")
        vocab = list(vocab)
        if tuple(vocab[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"{name}: vocab must start with {list(SPECIAL_TOKENS)}, got {vocab[:4]!r}")
        bad = [t for t in vocab if not isinstance(t, str) or not t]
        if bad:
            raise ValueError(f"{name}: vocab entries must be non-empty strings, got {bad[:5]!r}")
        if len(set(vocab)) != len(vocab):
            dupes = sorted(t for t, c in Counter(vocab).items() if c > 1)
            raise ValueError(f"{name}: duplicate vocab entries {dupes[:5]!r}")
        self._check_entries(vocab[4:])
        self._itos: list[str] = vocab
        self._stoi: dict[str, int] = {t: i for i, t in enumerate(vocab)}

    def _check_entries(self, tokens: list[str]) -> None:
        """Subclasses reject tokens that their splitting could never produce."""

    @classmethod
    @abstractmethod
    def split(cls, text: str) -> list[str]:
        """The pieces of ``text``; ``"".join(pieces) == text``."""

    @classmethod
    def build(cls, texts: Iterable[str], *, vocab_size: int | None = None, min_freq: int = 1) -> _VocabTokenizer:
        """Vocabulary of the pieces of ``texts`` seen at least ``min_freq`` times.

        ``vocab_size`` caps the vocabulary (specials included) at the most frequent pieces;
        ties are broken by the piece's text, so the result does not depend on the texts' order.
        """
        tokens = cls._ranked(texts, vocab_size, min_freq)
        if vocab_size is not None:
            tokens = tokens[: vocab_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *tokens])

    @classmethod
    def _ranked(cls, texts: Iterable[str], vocab_size: int | None, min_freq: int) -> list[str]:
        """Pieces seen at least ``min_freq`` times, most frequent first (ties: by text)."""
        texts = _check_corpus(texts, cls.__name__)
        _check_build_args(cls.__name__, vocab_size, min_freq, minimum=len(SPECIAL_TOKENS) + 1)
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls.split(text))
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted((kv for kv in counts.items() if kv[1] >= min_freq), key=lambda kv: (-kv[1], kv[0]))
        return [t for t, _ in ranked]

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        text = self._check_text(text, f"{type(self).__name__}.encode")
        return self._wrap(self._encode_pieces(self.split(text)), add_bos, add_eos)

    def _encode_pieces(self, pieces: list[str]) -> list[int]:
        return [self._stoi.get(p, UNK_ID) for p in pieces]

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        out = []
        for i in self._ids_list(ids, f"{type(self).__name__}.decode"):
            if skip_special and i in (PAD_ID, BOS_ID, EOS_ID):
                continue
            out.append(self._itos[i])
        return "".join(out)

    def tokens(self, text: str) -> list[str]:
        """The vocabulary entries ``text`` encodes to (``"<unk>"`` for unknown pieces)."""
        return [self._itos[i] for i in self.encode(text)]

    def to_dict(self) -> dict[str, Any]:
        return {"format": TOKENIZER_FORMAT, "version": TOKENIZER_VERSION, "kind": self.kind, "vocab": list(self._itos)}

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> _VocabTokenizer:
        vocab = d.get("vocab")
        if not isinstance(vocab, list):
            raise ValueError(
                f"tokenizer_from_dict: a {cls.kind!r} tokenizer needs 'vocab' (a list of strings), "
                f"got {type(vocab).__name__}"
            )
        return cls(vocab)


class CharTokenizer(_VocabTokenizer):
    """One token per Unicode code point (no normalisation, so ``"é"`` and ``"e\\u0301"`` differ).

    Round trip: ``decode(encode(text)) == text`` exactly when every character of ``text`` is in the
    vocabulary (accents, punctuation, emoji, newlines included); an unknown character decodes to
    ``"<unk>"``. An emoji made of several code points (``"👍🏽"``, flags, ZWJ sequences) is several
    tokens.
    """

    kind = "char"

    def _check_entries(self, tokens: list[str]) -> None:
        long = [t for t in tokens if len(t) != 1]
        if long:
            raise ValueError(f"CharTokenizer: vocab entries must be single characters, got {long[:5]!r}")

    @classmethod
    def split(cls, text: str) -> list[str]:
        return list(text)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        text = self._check_text(text, "CharTokenizer.encode")
        stoi = self._stoi
        return self._wrap([stoi.get(c, UNK_ID) for c in text], add_bos, add_eos)


class WordLevelTokenizer(_VocabTokenizer):
    """Words and punctuation marks, case and spacing kept (GPT-2's split without bytes or merges).

    A piece is a word (``\\w+`` with inner apostrophes: ``"don't"``, ``"café"``, ``"42"``) or one
    punctuation/symbol character (``","``, ``"😀"``), each with at most one leading space, or a
    run of other whitespace (``"\\n"``, a second space): ``"Hi, you!\\n"`` ->
    ``["Hi", ",", " you", "!", "\\n"]``. So ``"The"``, ``"the"`` and ``" the"`` are different
    tokens.

    Round trip: ``decode(encode(text)) == text`` exactly when every piece of ``text`` is in the
    vocabulary. An unknown piece with a leading space encodes as ``" "`` (always in the vocabulary)
    then the bare piece (or ``<unk>``), so unknown words decode as ``"<unk>"`` with their spacing.
    """

    kind = "word"

    def _check_entries(self, tokens: list[str]) -> None:
        if " " not in tokens:
            raise ValueError("WordLevelTokenizer: the vocabulary must contain the single space ' '")

    @classmethod
    def split(cls, text: str) -> list[str]:
        return _PIECE_RE.findall(text)

    @classmethod
    def build(cls, texts: Iterable[str], *, vocab_size: int | None = None, min_freq: int = 1) -> WordLevelTokenizer:
        # " " is always in the vocabulary: an unknown " word" falls back to " " + "word"/<unk>.
        tokens = [" ", *(t for t in cls._ranked(texts, vocab_size, min_freq) if t != " ")]
        if vocab_size is not None:
            tokens = tokens[: vocab_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *tokens])

    def _encode_pieces(self, pieces: list[str]) -> list[int]:
        stoi = self._stoi
        out = []
        for p in pieces:
            i = stoi.get(p)
            if i is not None:
                out.append(i)
            elif len(p) > 1 and p[0] == " " and not p[1].isspace():
                out.append(stoi[" "])
                out.append(stoi.get(p[1:], UNK_ID))
            else:
                out.append(UNK_ID)
        return out


class BPETokenizer(Tokenizer):
    """Byte-level BPE (as GPT-2) trained on the user's corpus with Hugging Face ``tokenizers``.

    The text is split by GPT-2's pattern, turned into UTF-8 bytes (each byte a symbol, so no text is
    ever unknown) and merged by the learned merges. Round trip: ``decode(encode(text)) == text``
    for *any* text (case, spacing, accents, emoji); ``<unk>`` never occurs. Special-token strings
    typed in the text (``"<bos>"``) are encoded as plain text, never as the special ids. A single
    token may hold part of a multi-byte character: decode whole sequences (or use
    :class:`StreamDecoder`), not token by token.

    ``vocab_size`` counts the 4 special tokens and the 256 byte symbols, so it is at least 260.
    """

    kind = "bpe"
    MIN_VOCAB = len(SPECIAL_TOKENS) + 256

    def __init__(self, hf_tokenizer: Any) -> None:
        for i, tok in enumerate(SPECIAL_TOKENS):
            if hf_tokenizer.token_to_id(tok) != i:
                raise ValueError(
                    f"BPETokenizer: the tokenizer must have {tok!r} at id {i}, "
                    f"found id {hf_tokenizer.token_to_id(tok)!r}"
                )
        hf_tokenizer.encode_special_tokens = True  # "<bos>" typed in a text is text (not saved by to_str)
        self._hf = hf_tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int = 1000, min_freq: int = 2) -> BPETokenizer:
        """Learn merges on ``texts`` until ``vocab_size`` tokens (or no pair is seen ``min_freq`` times)."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        texts = _check_corpus(texts, "BPETokenizer")
        _check_build_args("BPETokenizer", vocab_size, min_freq, minimum=cls.MIN_VOCAB, why=" (4 specials + 256 bytes)")
        hf = HFTokenizer(models.BPE(unk_token=UNK))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_freq,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        hf.train_from_iterator(texts, trainer=trainer)
        return cls(hf)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        text = self._check_text(text, "BPETokenizer.encode")
        return self._wrap(self._hf.encode(text, add_special_tokens=False).ids, add_bos, add_eos)

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        ids = self._ids_list(ids, "BPETokenizer.decode")
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i < len(SPECIAL_TOKENS):
                if run:
                    out.append(self._hf.decode(run, skip_special_tokens=False))
                    run = []
                if not skip_special or i == UNK_ID:
                    out.append(SPECIAL_TOKENS[i])
            else:
                run.append(i)
        if run:
            out.append(self._hf.decode(run, skip_special_tokens=False))
        return "".join(out)

    def tokens(self, text: str) -> list[str]:
        """The byte-level token strings of ``text`` (GPT-2's ``"Ġ"`` marks a space)."""
        return self._hf.encode(self._check_text(text, "BPETokenizer.tokens"), add_special_tokens=False).tokens

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TOKENIZER_FORMAT,
            "version": TOKENIZER_VERSION,
            "kind": self.kind,
            "hf_tokenizer": json.loads(self._hf.to_str()),
        }

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        spec = d.get("hf_tokenizer")
        if not isinstance(spec, dict):
            raise ValueError(
                "tokenizer_from_dict: a 'bpe' tokenizer needs 'hf_tokenizer' (the Hugging Face tokenizer as a "
                f"JSON object), got {type(spec).__name__}"
            )
        try:
            hf = HFTokenizer.from_str(json.dumps(spec))
        except Exception as err:  # tokenizers raises a bare Exception for malformed JSON specs
            raise ValueError(f"tokenizer_from_dict: 'hf_tokenizer' is not a valid tokenizers spec: {err}") from err
        return cls(hf)


class StreamDecoder:
    """Turns ids arriving one by one into text pieces, for streaming generation.

    ``push(id)`` returns the new text (possibly ``""``: a byte-level token may end inside a
    multi-byte character, which is held back until it is complete); ``flush()`` returns what is
    still held back. The pieces concatenate to ``tokenizer.decode(all ids)``.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self.ids: list[int] = []
        self._emitted = 0

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        if isinstance(self.tokenizer, _VocabTokenizer):  # one token is always whole text
            text = self.tokenizer.decode(self.ids[-1:], skip_special=self.skip_special)
            self._emitted += len(text)
            return text
        text = self.tokenizer.decode(self.ids, skip_special=self.skip_special)
        if text.endswith("\ufffd"):
            return ""
        new = text[self._emitted :]
        self._emitted = len(text)
        return new

    def flush(self) -> str:
        if isinstance(self.tokenizer, _VocabTokenizer):
            return ""
        text = self.tokenizer.decode(self.ids, skip_special=self.skip_special)
        new = text[self._emitted :]
        self._emitted = len(text)
        return new


_KINDS: dict[str, type[Tokenizer]] = {"char": CharTokenizer, "word": WordLevelTokenizer, "bpe": BPETokenizer}


def build_tokenizer(
    kind: TokenizerKind, texts: Iterable[str], *, vocab_size: int | None = None, min_freq: int = 1
) -> Tokenizer:
    """Build a ``"char"``, ``"word"`` or ``"bpe"`` tokenizer on ``texts`` (the training split).

    ``vocab_size`` caps the vocabulary, specials included (``None``: every piece seen ``min_freq``
    times for char/word; 1000 for BPE, which needs at least 260). ``min_freq``: pieces (BPE: pairs
    to merge) seen fewer times are left out.
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {sorted(_KINDS)}")
    if kind == "bpe":
        return BPETokenizer.train(texts, vocab_size=1000 if vocab_size is None else vocab_size, min_freq=min_freq)
    cls = _KINDS[kind]
    assert issubclass(cls, _VocabTokenizer)
    return cls.build(texts, vocab_size=vocab_size, min_freq=min_freq)


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from :meth:`Tokenizer.to_dict`; a clear error for anything else."""
    if not isinstance(d, dict):
        raise TypeError(f"tokenizer_from_dict expects a dict (from Tokenizer.to_dict()), got {type(d).__name__}")
    if d.get("format") != TOKENIZER_FORMAT:
        is_classify = d.get("format") == WordTokenizer.FORMAT
        hint = " (that is a classification WordTokenizer: use WordTokenizer.from_dict)" if is_classify else ""
        raise ValueError(f"tokenizer_from_dict: 'format' must be {TOKENIZER_FORMAT!r}, got {d.get('format')!r}{hint}")
    if d.get("version") != TOKENIZER_VERSION:
        raise ValueError(
            f"tokenizer_from_dict: unsupported version {d.get('version')!r} (supported: {TOKENIZER_VERSION}); "
            "it was written by a newer attnkit"
        )
    kind = d.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"tokenizer_from_dict: unknown kind {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind]._from_dict(d)  # type: ignore[attr-defined]


def _check_corpus(texts: Iterable[str], name: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name}: expected an iterable of texts, got a single str")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"{name}: every text must be a str; item {bad[0]} is a {type(texts[bad[0]]).__name__}")
    if not any(texts):
        raise ValueError(f"{name}: the corpus is empty; nothing to build a vocabulary from")
    return texts


def _check_build_args(name: str, vocab_size: int | None, min_freq: int, *, minimum: int, why: str = "") -> None:
    bad_size = isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum
    if vocab_size is not None and bad_size:
        raise ValueError(f"{name}: vocab_size must be None or an int >= {minimum}{why}, got {vocab_size!r}")
    if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
        raise ValueError(f"{name}: min_freq must be an int >= 1, got {min_freq!r}")
