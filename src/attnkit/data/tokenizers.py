"""A small word-level tokenizer for text classification.

No download and no external dependency: the vocabulary is built from the training texts.
Ids ``0`` and ``1`` are always ``<pad>`` and ``<unk>``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["PAD", "UNK", "WordTokenizer"]

PAD = "<pad>"
UNK = "<unk>"

# IMDB reviews contain literal HTML line breaks: "<br />", "<br/>", "<br>".
_BR_RE = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)
# A word (letters/digits/underscore, with inner apostrophes such as "don't") or one punctuation mark.
_TOKEN_RE = re.compile(r"\w+(?:'\w+)*|[^\w\s]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})


class WordTokenizer:
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
