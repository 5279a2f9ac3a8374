"""The tokenizer kinds, each registered once with :func:`tokenizer_kind`, and the fixed special tokens.

A kind is a ``tokenizers`` pipeline (normalizer, pre-tokenizer, decoder) and what the rest of attnkit
asks of it (:class:`KindSpec`); :class:`attnkit.text.tokenizers.Tokenizer` runs it, and a data config's
``tokenizer`` choice is read from :data:`TOKENIZER_KINDS`. A new kind is one decorated function here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tokenizers import Regex, decoders, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from attnkit.registry import Registry

__all__ = [
    "ASCII_WHITESPACE",
    "BOS",
    "BOS_ID",
    "EOS",
    "EOS_ID",
    "KINDS",
    "PAD",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "TEXT_PATTERN",
    "TEXT_SPECIAL_TOKENS",
    "TOKENIZER_KINDS",
    "TRAINABLE_KINDS",
    "UNK",
    "UNK_ID",
    "WORD_PATTERN",
    "ChunkSplit",
    "KindSpec",
    "TokenizerKind",
    "kind_names",
    "kind_spec",
    "tokenizer_kind",
]

PAD = "<pad>"
UNK = "<unk>"
BOS = "<bos>"
EOS = "<eos>"
# Fixed ids of the char/word/bpe tokenizers (generation and translation).
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)  # in id order
# The classification ("text") layout.
TEXT_SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK)

# GPT-2's split: a word (with inner apostrophes) or one punctuation mark, each with at most one
# leading space; whitespace runs otherwise (the last space of a run goes to the next word).
WORD_PATTERN = r" ?\w+(?:'\w+)*| ?[^\w\s]|\s+(?!\S)|\s+"
# Classification words: a word with inner apostrophes ("don't") or one punctuation mark.
TEXT_PATTERN = r"\w+(?:'\w+)*|[^\w\s]"


#: ``\\s`` of Oniguruma (Hugging Face's regex engine) on ASCII text: not ``\\x1c``-``\\x1f`` as Python's.
ASCII_WHITESPACE = "\t\n\x0b\x0c\r "
# GPT-2's pattern for Python's re on ASCII text (``\\p{L}`` = ``[A-Za-z]``, ``\\p{N}`` = ``[0-9]``).
_WS = r"\t\n\x0b\x0c\r "  # ASCII_WHITESPACE, as a regex
_BPE_ASCII = rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
_WORD_SPLIT = {"type": "Split", "pattern": {"Regex": WORD_PATTERN}, "behavior": "Isolated", "invert": False}


# ====================================================================== the kinds, registered once
@dataclass(frozen=True)
class ChunkSplit:
    """What :class:`attnkit.text.chunk_encoder.ChunkEncoder` needs of a kind to encode it without
    Hugging Face's pre-tokenizer: ``pieces``, the kind's pre-tokenizer on ASCII text for Python's
    ``re``; ``pipeline(spec)``, whether a ``tokenizer.json`` ``spec``'s pre-tokenizer and model are
    the ones :func:`attnkit.text.tokenizers.build_tokenizer` makes; ``byte_level``: byte-level BPE (ASCII
    text split by :func:`attnkit.text.byte_pairs.split_ascii_bpe`, pieces encoded by
    :class:`attnkit.text.byte_pairs.BytePairs`)."""

    pieces: re.Pattern[str]
    pipeline: Callable[[dict[str, Any]], bool]
    byte_level: bool = False


def _word_pipeline(spec: dict[str, Any]) -> bool:
    return (spec.get("pre_tokenizer") or {}) == _WORD_SPLIT and spec["model"].get("type") == "WordLevel"


def _bpe_pipeline(spec: dict[str, Any]) -> bool:
    pre = spec.get("pre_tokenizer") or {}
    model_ok = spec["model"].get("type") == "BPE" and not spec["model"].get("dropout")
    return {k: pre.get(k) for k in _BYTE_LEVEL} == _BYTE_LEVEL and model_ok


@dataclass(frozen=True)
class KindSpec:
    """A tokenizer kind: ``setup`` sets a ``tokenizers.Tokenizer``'s normalizer, pre-tokenizer and
    decoder; ``specials`` are its special tokens in id order; ``trainable``: built from the user's
    texts by :func:`build_tokenizer`; ``generation``: the fixed ``PAD_ID``/``BOS_ID``/``EOS_ID``/``UNK_ID``
    layout (language models, translation; exported to Hugging Face with a ``<bos>`` post-processor);
    ``whole_tokens``: every token decodes to whole text; ``min_vocab``: the smallest vocabulary it can
    build, where that is more than its specials + 1; ``decode_joiner``: what joins decoded runs
    between special tokens.

    The token cache's fast paths (:func:`attnkit.data.encode.fast_encoder`): ``code_points``, one token
    per code point (a vectorised lookup, faster than worker processes); ``chunks``, encoded by
    :class:`attnkit.text.chunk_encoder.ChunkEncoder` (see :class:`ChunkSplit`); neither: Hugging Face.

    ``pretrained``: a pretrained model's own pipeline, kept as it is: its special tokens are the
    model's, added by its post-processor after the text is cut (so texts are encoded one by one), it
    is saved with an imported model and written to Hugging Face as it is."""

    name: str
    setup: Callable[[HFTokenizer], None]
    specials: tuple[str, ...] = SPECIAL_TOKENS
    trainable: bool = True
    generation: bool = True
    whole_tokens: bool = False
    min_vocab: int | None = None
    decode_joiner: str = ""
    code_points: bool = False
    chunks: ChunkSplit | None = None
    pretrained: bool = False


TOKENIZER_KINDS: Registry[KindSpec] = Registry("tokenizer kind")


def tokenizer_kind(
    name: str, **options: Any
) -> Callable[[Callable[[HFTokenizer], None]], Callable[[HFTokenizer], None]]:
    """Registers the decorated ``setup(hf)`` as tokenizer kind ``name`` (see :class:`KindSpec`)."""

    def decorate(setup: Callable[[HFTokenizer], None]) -> Callable[[HFTokenizer], None]:
        TOKENIZER_KINDS.add(name, KindSpec(name, setup, **options))
        return setup

    return decorate


def kind_names(**flags: Any) -> tuple[str, ...]:
    """The registered kinds whose :class:`KindSpec` has every one of ``flags`` (all kinds without
    any), in registration order: ``kind_names(trainable=True, generation=True)``."""
    return tuple(name for name, spec in TOKENIZER_KINDS.items() if all(getattr(spec, k) == v for k, v in flags.items()))


def kind_spec(kind: str) -> KindSpec:
    """The :class:`KindSpec` of ``kind`` (a ``ValueError`` naming the choices for an unknown one)."""
    return TOKENIZER_KINDS.get(kind)


@tokenizer_kind("char", whole_tokens=True, code_points=True)
def _char(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    hf.decoder = decoders.Fuse()


@tokenizer_kind("word", whole_tokens=True, chunks=ChunkSplit(re.compile(WORD_PATTERN, re.ASCII), _word_pipeline))
def _word(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    hf.decoder = decoders.Fuse()


@tokenizer_kind(
    "bpe",
    min_vocab=len(SPECIAL_TOKENS) + 256,
    chunks=ChunkSplit(re.compile(_BPE_ASCII), _bpe_pipeline, byte_level=True),
)
def _bpe(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()


@tokenizer_kind("text", specials=TEXT_SPECIAL_TOKENS, generation=False, decode_joiner=" ")
def _text(hf: HFTokenizer) -> None:
    hf.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex(r"(?i)<br\s*/?>"), " "),  # IMDB reviews hold literal HTML breaks
            normalizers.Replace("\u2019", "'"),
            normalizers.Replace("\u2018", "'"),
            normalizers.Replace("`", "'"),
            normalizers.Lowercase(),
        ]
    )
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(TEXT_PATTERN), behavior="isolated")]
    )


@tokenizer_kind("pretrained", specials=(), trainable=False, generation=False, pretrained=True)
def _pretrained(hf: HFTokenizer) -> None:
    """A pretrained model's own pipeline (read by :mod:`attnkit.text.pretrained_tokenizer`): kept as it is."""


KINDS: tuple[str, ...] = kind_names()
TRAINABLE_KINDS: tuple[str, ...] = kind_names(trainable=True)
# A Literal built from the registry when the program runs; a type checker sees a str.
if TYPE_CHECKING:
    TokenizerKind = str
else:
    TokenizerKind = Literal[TRAINABLE_KINDS]
