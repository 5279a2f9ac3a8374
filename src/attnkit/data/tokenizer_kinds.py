"""The tokenizer kinds, each registered once with :func:`tokenizer_kind`, and the fixed special tokens.

A kind is a ``tokenizers`` pipeline (normalizer, pre-tokenizer, decoder) and what the rest of attnkit
asks of it (:class:`KindSpec`); :class:`attnkit.data.tokenizers.Tokenizer` runs it, and a data config's
``tokenizer`` choice is read from :data:`TOKENIZER_KINDS`. A new kind is one decorated function here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tokenizers import Regex, decoders, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from attnkit.data.registry import Registry

__all__ = [
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
    "KindSpec",
    "TokenizerKind",
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


# ====================================================================== the kinds, registered once
@dataclass(frozen=True)
class KindSpec:
    """A tokenizer kind: ``setup`` sets a ``tokenizers.Tokenizer``'s normalizer, pre-tokenizer and
    decoder; ``specials`` are its special tokens in id order; ``trainable``: built from the user's
    texts by :func:`build_tokenizer`; ``generation``: the fixed ``PAD_ID``/``BOS_ID``/``EOS_ID``/``UNK_ID``
    layout (language models, translation); ``whole_tokens``: every token decodes to whole text;
    ``min_vocab``: the smallest vocabulary it can build, where that is more than its specials + 1."""

    name: str
    setup: Callable[[HFTokenizer], None]
    specials: tuple[str, ...] = SPECIAL_TOKENS
    trainable: bool = True
    generation: bool = True
    whole_tokens: bool = False
    min_vocab: int | None = None


TOKENIZER_KINDS: Registry[KindSpec] = Registry("tokenizer kind")


def tokenizer_kind(name: str, **options: Any) -> Callable[[Any], Any]:
    """Registers the decorated ``setup(hf)`` as tokenizer kind ``name`` (see :class:`KindSpec`)."""
    return TOKENIZER_KINDS.register(name, lambda setup: KindSpec(name, setup, **options))


@tokenizer_kind("char", whole_tokens=True)
def _char(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    hf.decoder = decoders.Fuse()


@tokenizer_kind("word", whole_tokens=True)
def _word(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    hf.decoder = decoders.Fuse()


@tokenizer_kind("bpe", min_vocab=len(SPECIAL_TOKENS) + 256)
def _bpe(hf: HFTokenizer) -> None:
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()


@tokenizer_kind("text", specials=TEXT_SPECIAL_TOKENS, generation=False)
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


@tokenizer_kind("pretrained", specials=(), trainable=False, generation=False)
def _pretrained(hf: HFTokenizer) -> None:
    """A pretrained model's own pipeline (read by :mod:`attnkit.data.pretrained_tokenizer`): kept as it is."""


KINDS: tuple[str, ...] = TOKENIZER_KINDS.names()
TRAINABLE_KINDS: tuple[str, ...] = TOKENIZER_KINDS.names(trainable=True)
TokenizerKind = Literal[TRAINABLE_KINDS]  # type: ignore[valid-type]  # a Literal built from the registry
