"""The tokenizer of a pretrained model, read from its folder and run by the ``tokenizers`` library.

Reads ``tokenizer.json`` (any model the ``tokenizers`` library describes), or else the original
files: ``vocab.txt`` (BERT's WordPiece) or ``vocab.json`` + ``merges.txt`` (GPT-2's byte-level
BPE), set up as Hugging Face's ``BertTokenizer`` / ``GPT2Tokenizer`` do, with the options of
``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``, ``tokenize_chinese_chars``,
``add_prefix_space`` and the special tokens). Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE, WordPiece

from attnkit.text.tokenizer_kinds import KINDS
from attnkit.text.tokenizers import Tokenizer

__all__ = ["tokenizer_from_folder"]

_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep", "mask")
_BERT_DEFAULTS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
_GPT2_DEFAULTS = {"unk": "<|endoftext|>", "bos": "<|endoftext|>", "eos": "<|endoftext|>"}


def tokenizer_from_folder(folder: str | Path) -> Tokenizer:
    """The tokenizer saved in ``folder`` (see the module docstring for the files read), as a
    :class:`~attnkit.text.tokenizers.Tokenizer` of kind ``"pretrained"`` (or the kind that
    :meth:`Tokenizer.save` wrote). ``encode(text, max_len)`` gives the ids the model was trained on,
    special tokens included (BERT: ``[CLS] ... [SEP]``; GPT-2 adds none)."""
    folder = Path(folder)
    options = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    if not options and (folder / "special_tokens_map.json").is_file():
        options = _read_json(folder / "special_tokens_map.json")
    kind = options.get("attnkit_kind", "pretrained")
    given = {role: _token_string(options.get(f"{role}_token")) for role in _ROLES}
    named = {role: token for role, token in given.items() if token}
    if (folder / "tokenizer.json").is_file():
        try:
            tokenizer = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as err:  # the tokenizers library raises a bare Exception
            raise ValueError(f"cannot read {folder / 'tokenizer.json'}: {err}") from None
        model = json.loads(tokenizer.to_str())["model"].get("type")
        defaults = _BERT_DEFAULTS if model == "WordPiece" else _GPT2_DEFAULTS if model == "BPE" else {}
        return Tokenizer(
            tokenizer, kind if kind in KINDS else "pretrained", {**defaults, **named} if kind == "pretrained" else named
        )
    if (folder / "vocab.txt").is_file():
        specials = {**_BERT_DEFAULTS, **named}
        return Tokenizer(_wordpiece(folder / "vocab.txt", options, specials), "pretrained", specials)
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        specials = {**_GPT2_DEFAULTS, **named}
        return Tokenizer(_byte_level_bpe(folder, options, specials), "pretrained", specials)
    raise FileNotFoundError(
        f"no tokenizer in {folder}: expected tokenizer.json, vocab.txt (WordPiece, BERT) "
        "or vocab.json + merges.txt (byte-level BPE, GPT-2)"
    )


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


def _mark_special(tokenizer: HFTokenizer, specials: dict[str, str]) -> None:
    """Special tokens of the vocabulary are never split (``"[MASK]"`` in a text stays one token)."""
    tokens = [t for t in dict.fromkeys(specials.values()) if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(tokens)


def _wordpiece(vocab_file: Path, options: dict[str, Any], specials: dict[str, str]) -> HFTokenizer:
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
    tokenizer = HFTokenizer(WordPiece(vocab, unk_token=unk))
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


def _byte_level_bpe(folder: Path, options: dict[str, Any], specials: dict[str, str]) -> HFTokenizer:
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
    tokenizer = HFTokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(options.get("add_prefix_space", False)))
    tokenizer.decoder = decoders.ByteLevel()
    _mark_special(tokenizer, specials)
    return tokenizer
