"""Language-modelling data: a plain UTF-8 text corpus (or a built-in generated one) as blocks of token ids.

Documents are split off the corpus (at blank lines, or one per line), divided into train/val/test
with a seed, and tokenized by a tokenizer built on the *training* documents only. Every document
becomes ``<bos> tokens <eos>``; the documents of a split are concatenated into one stream, which is
cut into consecutive blocks: block ``i`` holds inputs ``stream[i*L : (i+1)*L]`` and targets
``stream[i*L + 1 : (i+1)*L + 1]`` (``L`` the model's context), so every token of the split is
predicted exactly once per epoch. Packing like this wastes nothing on padding (only the last block
is padded); a block may start in the middle of a document and a document may attend to the end of
the previous one, as in GPT-2's training. ``<bos>`` targets (the token after every ``<eos>``) and
padding are ignored by the loss (target ``IGNORE_INDEX``): a text's start is given, not predicted.

Batches are ``(inputs [B, L] int64, targets [B, L] int64)``. Nothing is downloaded.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor
from torch.utils.data import DataLoader

from attnkit.data.base import DataConfig, SplitDataModule
from attnkit.data.synthetic import BatchedTensorDataset, identity_collate
from attnkit.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = [
    "IGNORE_INDEX",
    "LMDataConfig",
    "LanguageModelDataModule",
    "generate_grammar_corpus",
    "pack_documents",
    "read_corpus",
    "split_documents",
]

IGNORE_INDEX = -100  # targets the loss skips (F.cross_entropy's default ignore_index)
BUILTIN = "grammar"
_SPLITS = ("train", "val", "test")


# ====================================================================== config
class LMDataConfig(DataConfig):
    """Where the text comes from, how it is cut into documents and tokenized.

    Attributes:
        source: ``"grammar"`` (the built-in generated corpus, :func:`generate_grammar_corpus`), the
            path of a plain UTF-8 text file, a folder (every ``*.txt`` file in it, recursively) or a
            glob of text files (``"corpus/*.txt"``); files are read in sorted path order.
        split_on: ``"blank_line"`` (default: a document is a paragraph; blank or whitespace-only
            lines separate documents) or ``"line"`` (every non-blank line is a document).
        tokenizer: ``"char"`` (default), ``"word"`` or ``"bpe"`` (see :mod:`attnkit.data.tokenizers`).
        vocab_size: vocabulary cap, specials included (``None``: every char/word seen ``min_freq``
            times; 1000 for BPE).
        min_freq: chars/words (BPE: pairs to merge) seen fewer times in the training documents are
            left out (unknown ones encode to ``<unk>``).
        val_fraction, test_fraction: shares of the documents held out (at least one each).
        seed: seeds the split (and the built-in corpus).
        builtin_documents: documents in the built-in corpus.
        cache_dir: where the tokenized corpus is cached (default ``$ATTNKIT_CACHE`` or
            ``~/.cache/attnkit``; see :mod:`attnkit.data.cache`).
    """

    source: str = Field(
        BUILTIN, min_length=1, description="'grammar', a UTF-8 text file, a folder of *.txt files or a glob"
    )
    split_on: Literal["blank_line", "line"] = "blank_line"
    tokenizer: Literal["char", "word", "bpe"] = "char"
    vocab_size: int | None = Field(None, ge=5, description="vocabulary cap, specials included (>= 260 for bpe)")
    min_freq: int = Field(1, ge=1)
    val_fraction: float = Field(0.05, gt=0.0, lt=1.0)
    test_fraction: float = Field(0.05, gt=0.0, lt=1.0)
    seed: int = 42
    builtin_documents: int = Field(6000, ge=3)
    cache_dir: str | None = Field(None, description="token cache folder (default $ATTNKIT_CACHE or ~/.cache/attnkit)")

    @model_validator(mode="after")
    def _check(self) -> LMDataConfig:
        if not self.source.strip():
            raise ValueError(f"data.source must be {BUILTIN!r} or the path of a UTF-8 text file, a folder or a glob")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be below 1, got {self.val_fraction} + {self.test_fraction}"
            )
        if self.tokenizer == "bpe" and self.vocab_size is not None and self.vocab_size < 260:
            raise ValueError(
                f"a bpe vocabulary needs vocab_size >= 260 (4 specials + 256 bytes), got {self.vocab_size}"
            )
        return self


# ====================================================================== reading
def read_corpus(path: str | Path, split_on: str = "blank_line") -> list[str]:
    """The documents of a UTF-8 text file (a leading BOM is ignored; ``\\r\\n`` reads as ``\\n``).

    ``split_on="blank_line"``: documents are separated by blank (or whitespace-only) lines and keep
    their inner line breaks; ``"line"``: every non-blank line is a document. Surrounding
    whitespace of each document is removed. Errors: a missing file, bytes that are not UTF-8 (the
    message gives the line and byte offset), and a file without any text.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"data.source={str(path)!r} is a folder; give a UTF-8 text file (or 'grammar')")
    if not path.is_file():
        raise FileNotFoundError(f"data.source: text file {path} does not exist (or use data.source=grammar)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        bad = raw[err.start : err.start + 4]
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 at byte offset {err.start} (line {line}, byte {column} of the line: "
            f"{bad!r}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.txt`"
        ) from None
    docs = split_documents(text, split_on)
    if not docs:
        raise ValueError(f"{path}: the corpus is empty (no non-blank text); nothing to train on")
    return docs


def split_documents(text: str, split_on: str = "blank_line") -> list[str]:
    """Documents of ``text`` (see :func:`read_corpus`); blank documents are dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if split_on == "blank_line":
        parts = re.split(r"\n[^\S\n]*\n", text)
    elif split_on == "line":
        parts = text.split("\n")
    else:
        raise ValueError(f"split_on must be 'blank_line' or 'line', got {split_on!r}")
    return [p.strip() for p in parts if p.strip()]


# ====================================================================== built-in corpus
_NOUNS = (
    ("cat", "cats"), ("dog", "dogs"), ("bird", "birds"), ("fox", "foxes"), ("owl", "owls"), ("mouse", "mice"),
    ("child", "children"), ("teacher", "teachers"), ("farmer", "farmers"), ("robot", "robots"),
    ("king", "kings"), ("girl", "girls"), ("boy", "boys"), ("elephant", "elephants"),
)  # fmt: skip
_NAMES = ("Anna", "Ben", "Clara", "David", "Elena", "Felix", "Omar", "Ivy")
_ADJECTIVES = ("small", "big", "old", "young", "happy", "clever", "lazy", "brown", "quiet", "angry", "hungry")
# (3rd person singular, plural/base, past)
_TRANSITIVE = (
    ("sees", "see", "saw"), ("likes", "like", "liked"), ("chases", "chase", "chased"),
    ("follows", "follow", "followed"), ("finds", "find", "found"), ("watches", "watch", "watched"),
    ("helps", "help", "helped"), ("feeds", "feed", "fed"),
)  # fmt: skip
_INTRANSITIVE = (
    ("sleeps", "sleep", "slept"), ("runs", "run", "ran"), ("sings", "sing", "sang"), ("waits", "wait", "waited"),
    ("smiles", "smile", "smiled"), ("laughs", "laugh", "laughed"), ("hides", "hide", "hid"),
)  # fmt: skip
_ADVERBS = ("quietly", "quickly", "happily", "again", "all day", "at night")
_PLACES = ("the garden", "the river", "the old house", "the forest", "the market", "the school", "the barn")
_PREPOSITIONS = ("in", "near", "behind")
_SG_DETERMINERS = ("the", "the", "a", "this", "that", "every")
_PL_DETERMINERS = ("the", "the", "some", "these", "those", "many", "two", "three")


class _Grammar:
    """A small probabilistic grammar of English sentences with subject-verb agreement."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def noun_phrase(self, plural: bool, depth: int = 0) -> str:
        r = self.rng
        if not plural and r.random() < 0.2:
            return r.choice(_NAMES)
        det = r.choice(_PL_DETERMINERS if plural else _SG_DETERMINERS)
        words = [r.choice(_ADJECTIVES)] if r.random() < 0.4 else []
        words.append(r.choice(_NOUNS)[1 if plural else 0])
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
        phrase = f"{det} {' '.join(words)}"
        if depth == 0 and r.random() < 0.15:  # a relative clause, agreeing with the noun
            phrase += " that " + self.verb_phrase(plural, "present", depth + 1)
        return phrase

    def subject(self) -> tuple[str, bool]:
        r = self.rng
        if r.random() < 0.1:
            return f"{r.choice(_NAMES)} and {r.choice(_NAMES)}", True
        plural = r.random() < 0.45
        return self.noun_phrase(plural), plural

    def verb_phrase(self, plural: bool, tense: str, depth: int = 0) -> str:
        r = self.rng
        index = {"present": 1 if plural else 0, "past": 2, "base": 1}[tense]
        if r.random() < 0.6:
            verb = r.choice(_TRANSITIVE)[index]
            phrase = f"{verb} {self.noun_phrase(r.random() < 0.4, depth + 1)}"
        else:
            phrase = r.choice(_INTRANSITIVE)[index]
            if r.random() < 0.4:
                phrase += " " + r.choice(_ADVERBS)
        if r.random() < 0.3:
            phrase += f" {r.choice(_PREPOSITIONS)} {r.choice(_PLACES)}"
        return phrase

    def clause(self, tense: str) -> str:
        subject, plural = self.subject()
        return f"{subject} {self.verb_phrase(plural, tense)}"

    def sentence(self, tense: str) -> str:
        r = self.rng
        x = r.random()
        if x < 0.55:
            s = self.clause(tense) + "."
        elif x < 0.75:
            s = f"{self.clause(tense)}, {r.choice(('and', 'but'))} {self.clause(tense)}."
        elif x < 0.87:
            s = f"when {self.clause(tense)}, {self.clause(tense)}."
        else:
            subject, plural = self.subject()
            aux = "did" if tense == "past" else ("do" if plural else "does")
            s = f"{aux} {subject} {self.verb_phrase(plural, 'base')}?"
        return s[0].upper() + s[1:]


def generate_grammar_corpus(n: int, seed: int = 42) -> list[str]:
    """``n`` short documents from a small probabilistic grammar of English (no download).

    **What it is.** Each document has 1-4 sentences, all in the present or all in the past tense:
    statements ("The hungry fox chased two birds near the river."), two clauses joined by "and" or
    "but", "When ..., ..." sentences and yes/no questions ("Does the old owl sleep?"), built
    from 14 nouns, 8 names, 11 adjectives, 15 verbs, places and adverbs, with subject-verb agreement
    (singular/plural, irregular plurals and past tenses, "a"/"an", "does"/"do"/"did" + base
    form) and relative clauses ("the dogs that chase a cat"). Fully determined by ``seed``.

    **What it can show.** That a language model learns structure beyond character frequencies:
    spelling, the vocabulary, agreement across a few words, capitalisation after a full stop; its
    bits per character fall far below the unigram entropy. **What it cannot show.** Anything about
    real text: the vocabulary is tiny and the grammar has no meaning, topic or long-range structure.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"generate_grammar_corpus: n must be an int >= 1, got {n!r}")
    rng = random.Random(seed)
    grammar = _Grammar(rng)
    docs = []
    for _ in range(n):
        tense = "past" if rng.random() < 0.5 else "present"
        docs.append(" ".join(grammar.sentence(tense) for _ in range(rng.randint(1, 4))))
    return docs


# ====================================================================== packing
def pack_documents(docs: list[list[int]], block: int) -> tuple[Tensor, Tensor]:
    """Encoded documents -> ``(inputs [N, block], targets [N, block])`` int64 (see the module docstring).

    Each document becomes ``<bos> ids <eos>``; the stream is cut into ``N = ceil((len - 1) / block)``
    blocks; the last one is padded with ``<pad>`` inputs and ``IGNORE_INDEX`` targets, and
    ``<bos>`` targets are ``IGNORE_INDEX`` too.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    stream = torch.tensor([t for ids in docs for t in (BOS_ID, *ids, EOS_ID)], dtype=torch.long)
    if stream.numel() < 2:
        return torch.empty(0, block, dtype=torch.long), torch.empty(0, block, dtype=torch.long)
    n = math.ceil((stream.numel() - 1) / block)
    inputs = torch.full((n * block,), PAD_ID, dtype=torch.long)
    targets = torch.full((n * block,), IGNORE_INDEX, dtype=torch.long)
    inputs[: stream.numel() - 1] = stream[:-1]
    targets[: stream.numel() - 1] = stream[1:]
    targets[targets == BOS_ID] = IGNORE_INDEX
    return inputs.view(n, block), targets.view(n, block)


# ====================================================================== data module
class LanguageModelDataModule(SplitDataModule):
    """Train/val/test blocks of ``block`` tokens (the model's context ``max_len``).

    ``setup()`` reads and splits the documents, builds the tokenizer on the training documents
    (unless one is given, e.g. from a checkpoint's artifacts) and packs every split.
    ``num_chars(split)``: characters of the split's documents plus one per document for its end
    (what ``val/bpc`` divides by).
    """

    def __init__(
        self,
        cfg: LMDataConfig,
        *,
        block: int,
        batch_size: int = 32,
        num_workers: int = 0,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__()
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an int >= 1, got {block!r}")
        self.cfg = cfg
        self.block = block
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._tokenizer = tokenizer
        self.documents: dict[str, list[str]] = {}
        self.datasets: dict[str, BatchedTensorDataset] = {}

    @classmethod
    def from_artifacts(
        cls, cfg: LMDataConfig, artifacts: dict[str, Any], *, block: int, batch_size: int = 32, num_workers: int = 0
    ) -> LanguageModelDataModule:
        """A module that reuses the tokenizer saved by :meth:`artifacts`."""
        return cls(cfg, block=block, batch_size=batch_size, num_workers=num_workers, tokenizer=tokenizer_of(artifacts))

    def prepare_data(self) -> None:
        """Nothing to download."""

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        c = self.cfg
        docs = (
            generate_grammar_corpus(c.builtin_documents, c.seed)
            if c.source == BUILTIN
            else read_corpus(c.source, c.split_on)
        )
        self.documents = _split(docs, c.val_fraction, c.test_fraction, c.seed, c.source, c.split_on)
        if self._tokenizer is None:
            self._tokenizer = build_tokenizer(
                c.tokenizer, self.documents["train"], vocab_size=c.vocab_size, min_freq=c.min_freq
            )
        tok = self._tokenizer
        for split in _SPLITS:
            inputs, targets = pack_documents([tok.encode(d) for d in self.documents[split]], self.block)
            self.datasets[split] = BatchedTensorDataset(inputs, targets)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"LanguageModelDataModule: call setup() before {split}_dataloader()")
        return self._seeded_loader(self.datasets[split], shuffle, self.cfg.seed, identity_collate)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise RuntimeError("LanguageModelDataModule: the tokenizer is built by setup(); call it first")
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def num_chars(self, split: str) -> int:
        """Characters of the split's documents + one per document (its end, predicted as ``<eos>``)."""
        return sum(len(d) + 1 for d in self.documents[split])

    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable ``{"tokenizer": ..., "tokenizer_kind": ...}`` stored in checkpoints."""
        return {"tokenizer": self.tokenizer.to_dict(), "tokenizer_kind": self.tokenizer.kind}

    def stats(self) -> dict[str, Any]:
        """Documents, characters, tokens, blocks and ``<unk>`` share per split, and the training
        characters' unigram entropy in bits (what a model that ignores context can reach)."""
        if not self.datasets:
            raise RuntimeError("LanguageModelDataModule: call setup() first")
        counts = Counter("".join(d + "\n" for d in self.documents["train"]))
        total = sum(counts.values())
        entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
        out: dict[str, Any] = {"vocab_size": self.vocab_size, "block": self.block, "unigram_bits_per_char": entropy}
        for split in _SPLITS:
            targets = self.datasets[split].tensors[1]
            real = targets[targets != IGNORE_INDEX]
            out[split] = {
                "documents": len(self.documents[split]),
                "chars": self.num_chars(split),
                "tokens": int(real.numel()),
                "blocks": len(self.datasets[split]),
                "unk_rate": float((real == 3).float().mean()) if real.numel() else 0.0,
            }
        return out


def tokenizer_of(artifacts: dict[str, Any]) -> Tokenizer:
    """The tokenizer stored in a checkpoint's artifacts."""
    if not isinstance(artifacts, dict) or "tokenizer" not in artifacts:
        keys = sorted(artifacts) if isinstance(artifacts, dict) else type(artifacts).__name__
        raise ValueError(f"language-model artifacts must hold 'tokenizer'; found {keys}")
    return tokenizer_from_dict(artifacts["tokenizer"])


def _split(
    docs: list[str], val_fraction: float, test_fraction: float, seed: int, source: str, split_on: str
) -> dict[str, list[str]]:
    """Seeded shuffle of the documents, then ``round(n * fraction)`` (at least 1) for val and test."""
    n = len(docs)
    if n < 3:
        advice = " (or data.split_on=line to make every line a document)" if split_on == "blank_line" else ""
        raise ValueError(
            f"data.source={source!r} has {n} document(s); at least 3 are needed (train, val and test each get whole "
            f"documents): separate documents by blank lines{advice}"
        )
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(n * val_fraction))
    n_test = max(1, round(n * test_fraction))
    n_train = max(1, n - n_val - n_test)
    n_test = n - n_train - n_val
    take = [docs[i] for i in order]
    return {"train": take[:n_train], "val": take[n_train : n_train + n_val], "test": take[n_train + n_val :]}
