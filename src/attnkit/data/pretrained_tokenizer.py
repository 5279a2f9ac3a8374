"""The tokenizer of a pretrained model, read from its folder and run by the ``tokenizers`` library.

Reads ``tokenizer.json`` (any model the ``tokenizers`` library describes), or else the original
files: ``vocab.txt`` (BERT's WordPiece) or ``vocab.json`` + ``merges.txt`` (GPT-2's byte-level
BPE), set up as Hugging Face's ``BertTokenizer`` / ``GPT2Tokenizer`` do, with the options of
``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``, ``tokenize_chinese_chars``,
``add_prefix_space`` and the special tokens). Nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE, WordPiece

__all__ = ["PretrainedTokenizer"]

_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep", "mask")
_BERT_DEFAULTS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
_GPT2_DEFAULTS = {"unk": "<|endoftext|>", "bos": "<|endoftext|>", "eos": "<|endoftext|>"}


class PretrainedTokenizer:
    """A pretrained model's tokenizer (a ``tokenizers.Tokenizer``) and its special tokens.

    ``encode(text, max_len)`` gives the ids the model was trained on, special tokens included
    (BERT: ``[CLS] ... [SEP]``; GPT-2 adds none); a text longer than ``max_len`` is truncated at the
    end, keeping the special tokens (as Hugging Face does). ``pad_id``, ``unk_id``, ``bos_id``,
    ``eos_id``, ``cls_id``, ``sep_id``, ``mask_id`` are ``None`` when the model has no such token.

    Args:
        tokenizer: the ``tokenizers.Tokenizer`` (its own truncation and padding are turned off).
        special_tokens: role (``pad``, ``unk``, ``bos``, ``eos``, ``cls``, ``sep``, ``mask``) -> token
            string; tokens not in the vocabulary are left out.
    """

    FORMAT = "attnkit.pretrained_tokenizer"
    VERSION = 1

    def __init__(self, tokenizer: Tokenizer, special_tokens: dict[str, str] | None = None) -> None:
        unknown = sorted(set(special_tokens or {}) - set(_ROLES))
        if unknown:
            raise ValueError(f"PretrainedTokenizer: unknown special-token roles {unknown}; allowed: {list(_ROLES)}")
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tok = tokenizer
        self.special_tokens = {
            role: token
            for role, token in (special_tokens or {}).items()
            if token is not None and tokenizer.token_to_id(token) is not None
        }
        self._n_special = tokenizer.num_special_tokens_to_add(is_pair=False)

    def _id(self, role: str) -> int | None:
        token = self.special_tokens.get(role)
        return None if token is None else self._tok.token_to_id(token)

    pad_id = property(lambda self: self._id("pad"), doc="id of the padding token, or None")
    unk_id = property(lambda self: self._id("unk"), doc="id of the unknown token, or None")
    bos_id = property(lambda self: self._id("bos"), doc="id of the beginning-of-text token, or None")
    eos_id = property(lambda self: self._id("eos"), doc="id of the end-of-text token, or None")
    cls_id = property(lambda self: self._id("cls"), doc="id of BERT's [CLS], or None")
    sep_id = property(lambda self: self._id("sep"), doc="id of BERT's [SEP], or None")
    mask_id = property(lambda self: self._id("mask"), doc="id of BERT's [MASK], or None")

    # ------------------------------------------------------------------ reading a folder
    @classmethod
    def from_folder(cls, folder: str | Path) -> PretrainedTokenizer:
        """The tokenizer saved in ``folder`` (see the module docstring for the files read)."""
        folder = Path(folder)
        options = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
        if not options and (folder / "special_tokens_map.json").is_file():
            options = _read_json(folder / "special_tokens_map.json")
        named = {role: _token_string(options.get(f"{role}_token")) for role in _ROLES}
        named = {role: token for role, token in named.items() if token}
        if (folder / "tokenizer.json").is_file():
            try:
                tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as err:  # the tokenizers library raises a bare Exception
                raise ValueError(f"cannot read {folder / 'tokenizer.json'}: {err}") from None
            model = json.loads(tokenizer.to_str())["model"].get("type")
            defaults = _BERT_DEFAULTS if model == "WordPiece" else _GPT2_DEFAULTS if model == "BPE" else {}
            return cls(tokenizer, {**defaults, **named})
        if (folder / "vocab.txt").is_file():
            return cls(
                _wordpiece(folder / "vocab.txt", options, {**_BERT_DEFAULTS, **named}), {**_BERT_DEFAULTS, **named}
            )
        if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            specials = {**_GPT2_DEFAULTS, **named}
            return cls(_byte_level_bpe(folder, options, specials), specials)
        raise FileNotFoundError(
            f"no tokenizer in {folder}: expected tokenizer.json, vocab.txt (WordPiece, BERT) "
            "or vocab.json + merges.txt (byte-level BPE, GPT-2)"
        )

    # ------------------------------------------------------------------ coding
    def encode(self, text: str, max_len: int | None = None, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``, special tokens included; at most ``max_len`` ids (truncated at the end)."""
        if not isinstance(text, str):
            raise TypeError(f"PretrainedTokenizer.encode expects a str, got {type(text).__name__}")
        extra = self._n_special if add_special_tokens else 0
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= extra):
            raise ValueError(
                f"PretrainedTokenizer.encode: max_len must be None or an int > {extra} (the special tokens), "
                f"got {max_len!r}"
            )
        encoding = self._tok.encode(text, add_special_tokens=False)
        if max_len is not None:
            encoding.truncate(max_len - extra)
        if add_special_tokens:
            encoding = self._tok.post_process(encoding)
        return list(encoding.ids)

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``encode(text)`` as strings."""
        return [self.id_to_token(i) for i in self.encode(text)]

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids`` (special tokens left out unless ``skip_special=False``)."""
        n = self.vocab_size
        bad = [int(i) for i in ids if not 0 <= int(i) < n]
        if bad:
            raise ValueError(f"PretrainedTokenizer.decode: ids {bad[:5]} out of range [0, {n})")
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        """Id of ``token``, or ``None`` when it is not in the vocabulary."""
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        """Token string of id ``i``."""
        token = self._tok.id_to_token(int(i))
        if token is None:
            raise ValueError(f"PretrainedTokenizer: id {i} out of range [0, {self.vocab_size})")
        return token

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def __len__(self) -> int:
        return self.vocab_size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PretrainedTokenizer) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self._tok.to_str())

    def __repr__(self) -> str:
        return f"PretrainedTokenizer(vocab_size={self.vocab_size}, special_tokens={self.special_tokens})"

    # ------------------------------------------------------------------ serialisation
    def save(self, folder: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` (the special tokens) to ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._tok.save(str(folder / "tokenizer.json"))
        options = {f"{role}_token": token for role, token in self.special_tokens.items()}
        (folder / "tokenizer_config.json").write_text(json.dumps(options, indent=2, sort_keys=True) + "\n")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description (stored in checkpoints); :meth:`from_dict` rebuilds it."""
        return {
            "format": self.FORMAT,
            "version": self.VERSION,
            "tokenizer": self._tok.to_str(),
            "special_tokens": dict(self.special_tokens),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PretrainedTokenizer:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(d, dict) or d.get("format") != cls.FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"PretrainedTokenizer.from_dict: format must be {cls.FORMAT!r}, got {got!r}")
        if d.get("version") != cls.VERSION:
            raise ValueError(
                f"PretrainedTokenizer.from_dict: unsupported version {d.get('version')!r} (supported: {cls.VERSION})"
            )
        try:
            tokenizer = Tokenizer.from_str(d["tokenizer"])
        except Exception as err:  # the tokenizers library raises a bare Exception
            raise ValueError(f"PretrainedTokenizer.from_dict: the stored tokenizer cannot be read: {err}") from None
        return cls(tokenizer, d.get("special_tokens") or {})


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_string(value: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _mark_special(tokenizer: Tokenizer, specials: dict[str, str]) -> None:
    """Special tokens of the vocabulary are never split (``"[MASK]"`` in a text stays one token)."""
    tokens = [t for t in dict.fromkeys(specials.values()) if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(tokens)


def _wordpiece(vocab_file: Path, options: dict[str, Any], specials: dict[str, str]) -> Tokenizer:
    """BERT's WordPiece tokenizer from ``vocab.txt``, as Hugging Face's ``BertTokenizer`` builds it."""
    lines = vocab_file.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab: dict[str, int] = {}
    for i, token in enumerate(lines):
        vocab[token.rstrip("\n")] = i  # a repeated token keeps its last id, as BertTokenizer does
    unk = specials["unk"]
    if unk not in vocab:
        raise ValueError(f"{vocab_file}: the unknown token {unk!r} is not in the vocabulary")
    tokenizer = Tokenizer(WordPiece(vocab, unk_token=unk))
    lowercase = bool(options.get("do_lower_case", True))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(options.get("tokenize_chinese_chars", True)),
        strip_accents=options.get("strip_accents"),
        lowercase=lowercase,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    _mark_special(tokenizer, specials)
    cls_token, sep_token = specials["cls"], specials["sep"]
    if cls_token in vocab and sep_token in vocab:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls_token}:0 $A:0 {sep_token}:0",
            pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
            special_tokens=[(cls_token, vocab[cls_token]), (sep_token, vocab[sep_token])],
        )
    return tokenizer


def _byte_level_bpe(folder: Path, options: dict[str, Any], specials: dict[str, str]) -> Tokenizer:
    """GPT-2's byte-level BPE from ``vocab.json`` + ``merges.txt``, as ``GPT2Tokenizer`` builds it."""
    try:
        model = BPE.from_file(
            str(folder / "vocab.json"),
            str(folder / "merges.txt"),
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    except Exception as err:  # the tokenizers library raises a bare Exception
        raise ValueError(f"cannot read the BPE files vocab.json / merges.txt in {folder}: {err}") from None
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(options.get("add_prefix_space", False)))
    tokenizer.decoder = decoders.ByteLevel()
    _mark_special(tokenizer, specials)
    return tokenizer
