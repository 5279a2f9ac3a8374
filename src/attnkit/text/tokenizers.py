"""One tokenizer class for every task, run by Hugging Face ``tokenizers``.

:class:`Tokenizer` wraps a ``tokenizers.Tokenizer`` (its ``tokenizer.json`` is the one save format,
stored in checkpoints) and knows its special tokens by role. Kinds, all built from the user's
(training) texts with :func:`build_tokenizer` (no download) except ``pretrained``:

* ``"char"``: one token per Unicode code point; ``"word"``: words and punctuation marks with case and spacing kept
  (GPT-2's split without bytes or merges); ``"bpe"``: byte-level BPE as GPT-2. Fixed special ids
  ``PAD_ID = 0`` ``<pad>``, ``BOS_ID = 1`` ``<bos>``, ``EOS_ID = 2`` ``<eos>``, ``UNK_ID = 3`` ``<unk>``;
  ``decode(encode(text)) == text`` when the text's pieces are known (always for BPE).
* ``"text"`` (text classification): lower-cased words and punctuation marks, ``<br />`` tags removed. Its layout is
  ``<pad>`` = 0, ``<unk>`` = 1 and no ``<bos>``/``<eos>`` (a classifier never uses them): kept from the earlier word
  tokenizer, so the embedding rows of classify checkpoints written before keep their meaning.
* ``"pretrained"``: a pretrained model's tokenizer (BERT's WordPiece, GPT-2's BPE) read by
  :func:`attnkit.text.pretrained_tokenizer.tokenizer_from_folder`; its special tokens are the model's own (``None``
  where it has none).

Differences from the hand-written tokenizers of attnkit 0.1 (tested in ``tests/data/test_tokenizers.py``):
a ``"word"`` piece that is not in the vocabulary encodes to one ``<unk>`` (it was ``" "`` + ``<unk>``
for an unknown word after a space), and a combining mark (``"e\\u0301"``) stays inside its word for
``"word"`` and ``"text"`` (it was a piece of its own). Otherwise the ids are the same.

``to_dict()`` is JSON (``{"format": "attnkit.tokenizer", "version": 2, "kind", "tokenizer":
<tokenizer.json>, "special_tokens"}``); :func:`tokenizer_from_dict` reads it and converts the older
formats (``attnkit.tokenizer`` v1, ``attnkit.word_tokenizer``, ``attnkit.pretrained_tokenizer``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from attnkit.text.tokenizer_kinds import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    KINDS,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    TEXT_SPECIAL_TOKENS,
    TOKENIZER_KINDS,
    TRAINABLE_KINDS,
    UNK,
    UNK_ID,
    WORD_PATTERN,
    TokenizerKind,
)

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
    "WORD_PATTERN",
    "Tokenizer",
    "TokenizerKind",
    "build_tokenizer",
    "tokenizer_from_dict",
]

FORMAT = "attnkit.tokenizer"
VERSION = 2
_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep", "mask")
_GENERATION_SPECIALS = {"pad": PAD, "bos": BOS, "eos": EOS, "unk": UNK}
_TEXT_SPECIALS = {"pad": PAD, "unk": UNK}


def _pipeline(kind: str, model: Any) -> HFTokenizer:
    """A ``tokenizers.Tokenizer`` of ``kind`` around ``model`` (normalizer, pre-tokenizer, decoder)."""
    if kind not in TRAINABLE_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {list(TRAINABLE_KINDS)}")
    hf = HFTokenizer(model)
    TOKENIZER_KINDS.get(kind).setup(hf)
    return hf


def _from_vocab(kind: str, vocab: Sequence[str], specials: Sequence[str]) -> Tokenizer:
    """A WordLevel tokenizer of ``kind`` whose ids are the positions in ``vocab``."""
    vocab = list(vocab)
    if tuple(vocab[: len(specials)]) != tuple(specials):
        raise ValueError(f"a {kind!r} vocabulary must start with {list(specials)}, got {vocab[: len(specials)]!r}")
    bad = [t for t in vocab if not isinstance(t, str) or not t]
    if bad:
        raise ValueError(f"vocabulary entries must be non-empty strings, got {bad[:5]!r}")
    if len(set(vocab)) != len(vocab):
        dupes = sorted(t for t, c in Counter(vocab).items() if c > 1)
        raise ValueError(f"duplicate vocabulary entries {dupes[:5]!r}")
    if kind == "char" and any(len(t) != 1 for t in vocab[len(specials) :]):
        raise ValueError("a 'char' vocabulary holds single characters after the special tokens")
    hf = _pipeline(kind, models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token=UNK))
    roles = _GENERATION_SPECIALS if TOKENIZER_KINDS.get(kind).generation else _TEXT_SPECIALS
    return Tokenizer(hf, kind, roles)


# ====================================================================== the class
class Tokenizer:
    """A tokenizer: a ``tokenizers.Tokenizer`` (``backend``), its ``kind`` and its special tokens.

    Args:
        backend: the Hugging Face tokenizer (its own truncation and padding are turned off).
        kind: ``"char"``, ``"word"``, ``"bpe"``, ``"text"`` or ``"pretrained"`` (see the module docstring).
        special_tokens: role (``pad``, ``unk``, ``bos``, ``eos``, ``cls``, ``sep``, ``mask``) -> token string; tokens
            not in the vocabulary are left out. ``pad_id`` ... ``mask_id`` are their ids (``None`` when absent).

    Special-token strings typed in a text (``"<bos>"``) are text for every kind but ``pretrained``
    (where ``"[MASK]"`` is the model's mask token, as in Hugging Face).
    """

    def __init__(self, backend: HFTokenizer, kind: str, special_tokens: dict[str, str] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {list(KINDS)}")
        unknown = sorted(set(special_tokens or {}) - set(_ROLES))
        if unknown:
            raise ValueError(f"Tokenizer: unknown special-token roles {unknown}; allowed: {list(_ROLES)}")
        backend.no_truncation()
        backend.no_padding()
        self.backend = backend
        self.kind = kind
        self.special_tokens = {
            role: token
            for role, token in (special_tokens or {}).items()
            if token is not None and backend.token_to_id(token) is not None
        }
        if not self.spec.pretrained:
            backend.add_special_tokens(list(self.special_tokens.values()))  # already in the vocabulary: same ids
            backend.encode_special_tokens = True  # "<bos>" typed in a text is text (not saved by to_str)
        self._special_ids = frozenset(self.backend.token_to_id(t) for t in self.special_tokens.values())
        self._n_post = backend.num_special_tokens_to_add(is_pair=False)

    spec = property(lambda self: TOKENIZER_KINDS.get(self.kind), doc="the kind's registered KindSpec")

    def _id(self, role: str) -> int | None:
        token = self.special_tokens.get(role)
        return None if token is None else self.backend.token_to_id(token)

    pad_id = property(lambda self: self._id("pad"), doc="id of the padding token, or None")
    unk_id = property(lambda self: self._id("unk"), doc="id of the unknown token, or None")
    bos_id = property(lambda self: self._id("bos"), doc="id of the beginning-of-text token, or None")
    eos_id = property(lambda self: self._id("eos"), doc="id of the end-of-text token, or None")
    cls_id = property(lambda self: self._id("cls"), doc="id of BERT's [CLS], or None")
    sep_id = property(lambda self: self._id("sep"), doc="id of BERT's [SEP], or None")
    mask_id = property(lambda self: self._id("mask"), doc="id of BERT's [MASK], or None")

    # ------------------------------------------------------------------ coding
    def encode(
        self,
        text: str,
        max_len: int | None = None,
        *,
        add_bos: bool = False,
        add_eos: bool = False,
        add_special_tokens: bool = True,
    ) -> list[int]:
        """Token ids of ``text``: ``<bos>`` first / ``<eos>`` last when asked (char/word/bpe), the model's own
        special tokens for ``pretrained`` (BERT: ``[CLS] ... [SEP]``) unless ``add_special_tokens=False`` (as in
        Hugging Face); at most ``max_len`` ids, the text truncated at the end (special tokens kept)."""
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer.encode: expected a str, got {type(text).__name__}")
        extra = (post := self._n_post if add_special_tokens else 0) + int(add_bos) + int(add_eos)
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= extra):
            raise ValueError(f"Tokenizer.encode: max_len must be None or an int > {extra}, got {max_len!r}")
        encoding = self.backend.encode(text, add_special_tokens=False)
        if max_len is not None:
            encoding.truncate(max_len - extra)
        if post:
            encoding = self.backend.post_process(encoding)
        return self._wrap(list(encoding.ids), add_bos, add_eos)

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = False, add_eos: bool = False) -> list[list[int]]:
        """:meth:`encode` of every text, in parallel threads (Hugging Face ``encode_batch``)."""
        if isinstance(texts, str):
            raise TypeError("Tokenizer.encode_batch: expected a list of texts, got a single str")
        if self._n_post:
            return [self.encode(t, add_bos=add_bos, add_eos=add_eos) for t in texts]
        encodings = self.backend.encode_batch_fast(list(texts), add_special_tokens=False)
        return [self._wrap(e.ids, add_bos, add_eos) for e in encodings]

    def _wrap(self, ids: list[int], add_bos: bool, add_eos: bool) -> list[int]:
        bos, eos = self._id("bos"), self._id("eos")
        for flag, token_id, role in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
            if flag and token_id is None:
                raise ValueError(f"Tokenizer.encode: this {self.kind!r} tokenizer has no {role} token")
        return ([bos] if add_bos and bos is not None else []) + ids + ([eos] if add_eos and eos is not None else [])

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids`` (a list of ints, a 1-D tensor or array).

        ``skip_special=True`` drops ``<pad>``, ``<bos>`` and ``<eos>`` and shows ``<unk>`` as the text ``"<unk>"``
        (it stands for real text that the vocabulary lacked, so it is kept visible); with ``skip_special=False``
        every special token shows as its string. ``pretrained``: ``decode(ids, skip_special_tokens=skip_special)``.
        """
        ids = self._ids_list(ids)
        if self.spec.pretrained:
            return self.backend.decode(ids, skip_special_tokens=skip_special)
        unk = self._id("unk")
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._special_ids:
                if run:
                    out.append(self.backend.decode(run, skip_special_tokens=False))
                    run = []
                if not skip_special or i == unk:
                    out.append(self.id_to_token(i))
            else:
                run.append(i)
        if run:
            out.append(self.backend.decode(run, skip_special_tokens=False))
        return self.spec.decode_joiner.join(out)

    def _ids_list(self, ids: Any) -> list[int]:
        if hasattr(ids, "tolist"):  # a tensor or a NumPy array
            ids = ids.tolist()
        if isinstance(ids, str | bytes):
            raise TypeError(f"Tokenizer.decode: expected a sequence of token ids, got {type(ids).__name__}")
        n = self.vocab_size
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"Tokenizer.decode: token ids must be ints, got {i!r} ({type(i).__name__})")
            if not 0 <= i < n:
                raise ValueError(f"Tokenizer.decode: id {i} out of range [0, {n}) of this vocabulary")
        return list(ids)

    def pieces(self, text: str) -> list[str]:
        """The pieces ``text`` is split into before the vocabulary lookup (normalised: lower-cased
        for ``text``); ``bpe`` pieces are the pre-tokenized words in GPT-2's byte alphabet."""
        if self.backend.normalizer is not None:
            text = self.backend.normalizer.normalize_str(text)
        return [p for p, _ in self.backend.pre_tokenizer.pre_tokenize_str(text)]

    def tokens(self, text: str) -> list[str]:
        """The token strings ``text`` encodes to (``"<unk>"`` for unknown pieces; BPE's ``"Ġ"`` is a space)."""
        return [self.id_to_token(i) for i in self.encode(text)]

    def token_to_id(self, token: str) -> int | None:
        """Id of ``token``, or ``None`` when it is not in the vocabulary."""
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        """Token string of id ``i``."""
        token = self.backend.id_to_token(int(i))
        if token is None:
            raise ValueError(f"Tokenizer: id {i} out of range [0, {self.vocab_size})")
        return token

    @property
    def vocab(self) -> list[str]:
        """Tokens in id order."""
        return cast("list[str]", [self.backend.id_to_token(i) for i in range(self.vocab_size)])  # every id is known

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.backend.token_to_id(token) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.backend.to_str())

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description (stored in checkpoints); :func:`tokenizer_from_dict` reads it."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "tokenizer": self.backend.to_str(),
            "special_tokens": dict(self.special_tokens),
        }

    def save(self, folder: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` (kind and special tokens) to ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / "tokenizer.json"))
        options = {f"{role}_token": token for role, token in self.special_tokens.items()}
        options["attnkit_kind"] = self.kind
        (folder / "tokenizer_config.json").write_text(json.dumps(options, indent=2, sort_keys=True) + "\n")


# ====================================================================== building
def build_tokenizer(
    kind: TokenizerKind, texts: Iterable[str], *, vocab_size: int | None = None, min_freq: int = 1
) -> Tokenizer:
    """Build a ``"char"``, ``"word"``, ``"bpe"`` or ``"text"`` tokenizer on ``texts`` (the training split).

    ``vocab_size`` caps the vocabulary, specials included (``None``: every piece seen ``min_freq`` times for
    char/word/text; 1000 for BPE, which needs at least 260). ``min_freq``: pieces (BPE: pairs to merge) seen fewer
    times are left out. Pieces are ranked by decreasing count, ties by their text, so the result does not depend on
    the texts' order. ``texts`` may be any iterable (a generator streaming a large corpus): it is read once.
    """
    if kind not in TRAINABLE_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {list(TRAINABLE_KINDS)}")
    spec = TOKENIZER_KINDS.get(kind)
    specials = spec.specials
    minimum = spec.min_vocab or len(specials) + 1
    if kind == "bpe" and vocab_size is None:
        vocab_size = 1000
    bad_size = isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum
    if vocab_size is not None and bad_size:
        why = " (4 specials + 256 bytes)" if kind == "bpe" else ""
        raise ValueError(
            f"build_tokenizer({kind!r}): vocab_size must be None or an int >= {minimum}{why}, got {vocab_size!r}"
        )
    if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
        raise ValueError(f"build_tokenizer({kind!r}): min_freq must be an int >= 1, got {min_freq!r}")
    texts = _CheckedTexts(texts, kind)
    if kind == "char":
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(text)
        ranked = sorted((kv for kv in counts.items() if kv[1] >= min_freq), key=lambda kv: (-kv[1], kv[0]))
        tokens = [t for t, _ in ranked]
    else:
        hf = _pipeline(kind, models.BPE(unk_token=UNK) if kind == "bpe" else models.WordLevel(unk_token=UNK))
        if kind == "bpe":
            assert vocab_size is not None  # 1000 by default for BPE
            bpe_trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                min_frequency=min_freq,
                special_tokens=list(SPECIAL_TOKENS),
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            )
            hf.train_from_iterator(cut_long_texts(texts), trainer=bpe_trainer)
            _check_not_empty(texts.seen, kind)
            return Tokenizer(hf, "bpe", _GENERATION_SPECIALS)
        # The trainer's own vocab_size defaults to 30,000: every piece is kept here, and cut below by rank.
        trainer = trainers.WordLevelTrainer(
            vocab_size=2**31 - 1, min_frequency=min_freq, special_tokens=[], show_progress=False
        )
        hf.train_from_iterator(cut_long_texts(texts) if kind == "word" else texts, trainer=trainer)
        learned = sorted(hf.get_vocab().items(), key=lambda kv: kv[1])
        tokens = [t for t, _ in learned if t not in specials]
    _check_not_empty(texts.seen, kind)
    if kind == "word":  # " " is always in the vocabulary (right after the specials)
        tokens = [" ", *(t for t in tokens if t != " ")]
    if vocab_size is not None:
        tokens = tokens[: vocab_size - len(specials)]
    return _from_vocab(kind, [*specials, *tokens], specials)


_SAFE_CUT = re.compile(r"(?<=[!-~])\n(?=[!-~])")  # a line break between two printable ASCII characters


def cut_long_texts(texts: Iterable[str], size: int = 1 << 20) -> Iterator[str]:
    """``texts``, each one longer than ``size`` characters cut into parts of about ``size`` after line
    breaks that stand between two printable ASCII characters (where it has them).

    Training a word or BPE vocabulary on one text of many MB (a log file without blank lines, read as one document)
    takes memory in proportion to it in Hugging Face ``tokenizers`` (about 1 GB for 9 MB); parts keep it small. The
    vocabulary is the same: both tokenizers' splits make ``"\\n"`` a piece of its own there (it is whitespace
    between two non-whitespace characters) and start the next piece after it, so the parts are split into exactly
    the pieces of the whole text, and the trainers count pieces."""
    for text in texts:
        start = 0
        while len(text) - start > size:
            cut = _SAFE_CUT.search(text, start + size)
            if cut is None:
                break
            yield text[start : cut.end()]
            start = cut.end()
        yield text[start:] if start else text


class _CheckedTexts:
    """Iterates ``texts`` once, checking that each is a str; ``seen`` says whether any was non-empty."""

    def __init__(self, texts: Iterable[str], kind: str) -> None:
        if isinstance(texts, str):
            raise TypeError(f"build_tokenizer({kind!r}): expected an iterable of texts, got a single str")
        self.texts, self.kind, self.seen = texts, kind, False

    def __iter__(self):
        for i, text in enumerate(self.texts):
            if not isinstance(text, str):
                raise TypeError(
                    f"build_tokenizer({self.kind!r}): every text must be a str; item {i} is a {type(text).__name__}"
                )
            self.seen = self.seen or bool(text.strip())
            yield text


def _check_not_empty(ok: bool, kind: str) -> None:
    if not ok:
        raise ValueError(f"build_tokenizer({kind!r}): the corpus is empty; nothing to build a vocabulary from")


# ====================================================================== reading back
def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from :meth:`Tokenizer.to_dict`, converting the formats of attnkit 0.1
    (``attnkit.tokenizer`` v1 char/word/bpe, ``attnkit.word_tokenizer``, ``attnkit.pretrained_tokenizer``)
    to the same ids; a clear error for anything else."""
    if not isinstance(d, dict):
        raise TypeError(f"tokenizer_from_dict expects a dict (from Tokenizer.to_dict()), got {type(d).__name__}")
    fmt, version = d.get("format"), d.get("version")
    if fmt == "attnkit.word_tokenizer" and version == 1:
        return _from_vocab("text", _vocab_of(d), TEXT_SPECIAL_TOKENS)
    if fmt == "attnkit.pretrained_tokenizer" and version == 1:
        return Tokenizer(_backend(d.get("tokenizer")), "pretrained", d.get("special_tokens") or {})
    if fmt == FORMAT and version == 1:
        kind = d.get("kind")
        if kind in ("char", "word"):
            return _from_vocab(kind, _vocab_of(d), SPECIAL_TOKENS)
        if kind == "bpe":
            spec = d.get("hf_tokenizer")
            return Tokenizer(
                _backend(json.dumps(spec) if isinstance(spec, dict) else spec), "bpe", _GENERATION_SPECIALS
            )
        raise ValueError(f"tokenizer_from_dict: unknown kind {kind!r}; expected one of ['bpe', 'char', 'word']")
    if fmt != FORMAT:
        raise ValueError(
            f"tokenizer_from_dict: 'format' must be {FORMAT!r}, got {fmt!r}; this is not a tokenizer saved by attnkit"
        )
    if version != VERSION:
        raise ValueError(
            f"tokenizer_from_dict: unsupported version {version!r} (supported: 1 and {VERSION}); "
            "it was written by a newer attnkit"
        )
    kind = d.get("kind")
    if kind not in KINDS:
        raise ValueError(f"tokenizer_from_dict: unknown kind {kind!r}; expected one of {list(KINDS)}")
    return Tokenizer(_backend(d.get("tokenizer")), kind, d.get("special_tokens") or {})


def _vocab_of(d: dict[str, Any]) -> list[str]:
    vocab = d.get("vocab")
    if not isinstance(vocab, list):
        raise ValueError(f"tokenizer_from_dict: 'vocab' must be a list of strings, got {type(vocab).__name__}")
    return vocab


def _backend(spec: Any) -> HFTokenizer:
    if not isinstance(spec, str):
        raise ValueError(f"tokenizer_from_dict: 'tokenizer' must be the tokenizer.json text, got {type(spec).__name__}")
    try:
        return HFTokenizer.from_str(spec)
    except Exception as err:  # the tokenizers library raises a bare Exception for malformed specs
        raise ValueError(f"tokenizer_from_dict: the stored tokenizer cannot be read: {err}") from None
