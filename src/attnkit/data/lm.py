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

import array
import hashlib
import itertools
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from attnkit.data.base import DataConfig, SplitDataModule
from attnkit.data.cache import (
    CachedTexts,
    CacheWriter,
    TokenCache,
    cache_root,
    content_digest,
    entry_key,
    open_or_build,
    reuse_entry,
    token_dtype,
)
from attnkit.data.encode import encode_batches, tokenize_workers
from attnkit.data.generators.grammar import generate_grammar_corpus
from attnkit.data.readers.text_files import corpus_files, iter_documents, read_corpus, split_documents
from attnkit.data.splits import SPLITS, TEST, TRAIN, fraction_split
from attnkit.data.synthetic import identity_collate
from attnkit.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, build_tokenizer, tokenizer_from_dict

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
        tokenizer_sample_mb: ``word`` and ``bpe`` learn their vocabulary from at most about this many
            MB of the training documents: every ``k``-th one when the corpus is larger (``None``: all of
            them). Hugging Face's trainers hold every distinct piece of what they read and its pairs,
            which grows with the corpus (about 0.6 GB for 270 MB of real text); words only outside the
            sample encode to ``<unk>`` (BPE falls back to smaller pieces).
        tokenize_workers: processes that tokenize the corpus when its cache is built (``None``: one
            per CPU core for a ``word`` or ``bpe`` corpus of 8 MB or more, else this process; see
            :func:`attnkit.data.encode.tokenize_workers`). The cache is the same for any number.
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
    tokenize_workers: int | None = Field(
        None, ge=1, description="processes that tokenize when the cache is built (default: one per core, large corpora)"
    )
    tokenizer_sample_mb: float | None = Field(
        64.0, gt=0, description="word/bpe: learn the vocabulary from at most this many MB of training text (None: all)"
    )

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


# ====================================================================== blocks read from the token cache
class PackedBlocks(Dataset):
    """Blocks of a split's token stream, read from its memory-mapped cache file.

    Block ``i`` is ``(inputs, targets)`` as :func:`pack_documents` makes them (the stream already
    holds ``<bos> ids <eos>`` per document): only the ``block + 1`` tokens of the block are read. A
    batch is gathered with one indexing of the memory map (``__getitems__``). The memory map is
    opened lazily in each process (DataLoader workers open their own).
    """

    def __init__(self, path: Path, dtype: np.dtype, block: int) -> None:
        self.path, self.dtype, self.block = path, np.dtype(dtype), block
        self.size = path.stat().st_size // self.dtype.itemsize
        self._tokens: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=self.dtype, mode="r") if self.size else np.zeros(0, self.dtype)
        return self._tokens

    def __len__(self) -> int:
        return math.ceil((self.size - 1) / self.block) if self.size >= 2 else 0

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        index = np.asarray(indices, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"block index out of range [0, {len(self)})")
        positions = index[:, None] * self.block + np.arange(self.block + 1)
        valid = positions < self.size
        window = torch.from_numpy(self.tokens[np.minimum(positions, self.size - 1)].astype(np.int64))
        valid_t = torch.from_numpy(valid)
        inputs = window[:, :-1].masked_fill(~valid_t[:, 1:], PAD_ID)
        targets = window[:, 1:].masked_fill(~valid_t[:, 1:], IGNORE_INDEX)
        return inputs, targets.masked_fill(targets == BOS_ID, IGNORE_INDEX)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        inputs, targets = self.__getitems__([index])
        return inputs[0], targets[0]


# ====================================================================== data module
class LanguageModelDataModule(SplitDataModule):
    """Train/val/test blocks of ``block`` tokens (the model's context ``max_len``), read from the
    token cache (:mod:`attnkit.data.cache`).

    ``prepare_data()`` (Lightning runs it on one process per node, before the others start)
    builds the cache unless it exists: it streams the corpus (never all of it in memory), splits
    the documents with a seed (:func:`attnkit.data.splits.fraction_split`), builds the tokenizer on
    the *training* documents (unless one is given, e.g. from a checkpoint's artifacts) and tokenizes
    every document once, in parallel batches, into a memory-mapped ``uint16``/``uint32`` file per
    split. ``setup()`` opens it (building it first when ``prepare_data`` was not called). A second
    run on the same data and config reuses the cache. Documents keep their corpus order within a
    split (the training blocks are shuffled by the loader).

    ``num_chars(split)``: characters of the split's documents plus one per document for its end
    (what ``val/bpc`` divides by). ``documents[split]``: the split's documents, read lazily.
    """

    def __init__(
        self,
        cfg: LMDataConfig,
        *,
        block: int,
        batch_size: int = 32,
        num_workers: int = 0,
        tokenizer: Tokenizer | None = None,
        progress: bool = False,
        test_only: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an int >= 1, got {block!r}")
        self.cfg = cfg
        self.block = block
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.progress = progress
        if test_only and tokenizer is None:
            raise ValueError("test_only=True needs the run's tokenizer (tokenizer=...)")
        self.test_only = test_only
        self._tokenizer = tokenizer
        self.cache: TokenCache | None = None
        self._folder: Path | None = None
        self.documents: dict[str, CachedTexts] = {}
        self.datasets: dict[str, PackedBlocks] = {}

    @classmethod
    def from_artifacts(
        cls, cfg: LMDataConfig, artifacts: dict[str, Any], *, block: int, batch_size: int = 32, num_workers: int = 0
    ) -> LanguageModelDataModule:
        """A module that reuses the tokenizer saved by :meth:`artifacts`."""
        return cls(cfg, block=block, batch_size=batch_size, num_workers=num_workers, tokenizer=tokenizer_of(artifacts))

    @classmethod
    def for_test_file(
        cls, cfg: LMDataConfig, artifacts: dict[str, Any], path: str | Path, *, block: int, batch_size: int = 32
    ) -> LanguageModelDataModule:
        """A module whose test split is every document of the UTF-8 text file ``path`` (or of the
        ``*.txt`` files of the folder ``path``, or a glob), cut into documents as ``cfg.split_on``
        says and encoded with the run's tokenizer, through the token cache like training data
        (the train and val splits are empty)."""
        cfg = cfg.model_copy(update={"source": str(path)})
        return cls(cfg, block=block, batch_size=batch_size, tokenizer=tokenizer_of(artifacts), test_only=True)

    # -------------------------------------------------------------- the cache
    BATCH_CHARS = 1 << 21  # documents are tokenized in batches of about this many characters

    def cache_folder(self) -> Path:
        """Where this data's cache entry is (see :mod:`attnkit.data.cache` for the key). Computed
        once: ``setup`` then takes the tokenizer from the entry, which must not move the key (a
        second ``prepare_data``, as ``Trainer.fit`` calls it after ``setup``, would build the same
        data again under a new key). Given a tokenizer (a trained run's), the entry of the run that
        built it from these options is used when it holds that tokenizer
        (:func:`attnkit.data.cache.reuse_entry`)."""
        if self._folder is None:
            given = self._tokenizer
            self._folder = self._key_folder(given)
            if given is not None and not self.test_only:
                self._folder = reuse_entry(self._folder, self._key_folder(None), {"tokenizer": given.to_dict()})
        return self._folder

    def _key_folder(self, tokenizer: Tokenizer | None) -> Path:
        c = self.cfg
        root = cache_root(c.cache_dir)
        if c.source == BUILTIN:
            sources: Any = {"builtin": BUILTIN, "documents": c.builtin_documents}
        else:
            sources = [content_digest(p, root) for p in corpus_files(c.source)]
        config = c.model_dump(exclude={"source", "cache_dir", "tokenize_workers"})
        if tokenizer is not None:
            config["tokenizer"] = hashlib.blake2b(tokenizer.backend.to_str().encode(), digest_size=16).hexdigest()
            config.pop("vocab_size"), config.pop("min_freq")
        if self.test_only:
            config["test_only"] = True
        return root / "lm" / entry_key({"sources": sources, "config": config, "format": 1})

    def prepare_data(self) -> None:
        """Build the token cache unless it exists (nothing is downloaded); once opened (and checked),
        it is not opened again."""
        folder = self.cache_folder()
        if self.cache is None or self.cache.folder != folder:
            self.cache = open_or_build(folder, self._build_cache)

    def _documents(self) -> Iterator[str]:
        c = self.cfg
        if c.source == BUILTIN:
            return iter(generate_grammar_corpus(c.builtin_documents, c.seed))
        return iter_documents(corpus_files(c.source), c.split_on)

    def _build_cache(self, folder: Path) -> None:
        c = self.cfg
        n = total_chars = 0
        for doc in self._documents():
            n += 1
            total_chars += len(doc)
        if self.test_only:
            if n == 0:
                raise ValueError(f"{c.source}: the file is empty (no non-blank text); nothing to evaluate")
            split_of = np.full(n, TEST, dtype=np.int8)
        elif n < 3:
            if n == 0:
                raise ValueError(
                    f"data.source={c.source!r}: the corpus is empty (no non-blank text); nothing to train on"
                )
            advice = " (or data.split_on=line to make every line a document)" if c.split_on == "blank_line" else ""
            raise ValueError(
                f"data.source={c.source!r} has {n} document(s); at least 3 are needed (train, val and test each get "
                f"whole documents): separate documents by blank lines{advice}"
            )
        else:
            split_of = fraction_split(n, c.val_fraction, c.test_fraction, c.seed, minimum=1)
        tokenizer = self._tokenizer
        if tokenizer is None:
            train: Iterator[str] = (d for d, s in zip(self._documents(), split_of) if s == TRAIN)
            if c.tokenizer == "char":  # character counts add up: count 1 MB pieces, not document by document
                train = _joined(train, 1 << 20)
            elif c.tokenizer_sample_mb is not None and total_chars > c.tokenizer_sample_mb * 1e6:
                every = math.ceil(total_chars / (c.tokenizer_sample_mb * 1e6))  # trainers hold what they read
                train = itertools.islice(train, 0, None, every)
            tokenizer = build_tokenizer(c.tokenizer, train, vocab_size=c.vocab_size, min_freq=c.min_freq)
        writer = CacheWriter(folder, SPLITS, token_dtype(tokenizer.vocab_size))
        texts = {s: (folder / f"{s}.text").open("wb") for s in SPLITS}
        text_lengths = {s: array.array("q") for s in SPLITS}  # 8 bytes a document
        chars = dict.fromkeys(SPLITS, 0)
        nbytes = sum(p.stat().st_size for p in corpus_files(c.source)) if c.source != BUILTIN else 0
        workers = tokenize_workers(c.tokenize_workers, tokenizer, nbytes)
        bar = tqdm(total=n, unit="doc", desc="tokenizing", disable=not self.progress, mininterval=1.0)
        try:
            for batch, encoded in encode_batches(tokenizer, self._batches(split_of), workers):
                for split, docs, (tokens, lengths) in zip(SPLITS, batch, encoded, strict=True):
                    if not docs:
                        continue
                    writer.add(split, tokens, lengths)
                    for d in docs:
                        raw = d.encode("utf-8")
                        texts[split].write(raw)
                        text_lengths[split].append(len(raw))
                        chars[split] += len(d) + 1
                    bar.update(len(docs))
        finally:
            bar.close()
            for f in texts.values():
                f.close()
        for s in SPLITS:
            offsets = np.zeros(len(text_lengths[s]) + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(text_lengths[s], dtype=np.int64), out=offsets[1:])
            np.save(folder / f"{s}.text_offsets.npy", offsets)
        docs = {s: len(text_lengths[s]) for s in SPLITS}
        writer.finish({"tokenizer": tokenizer.to_dict(), "chars": chars, "documents": docs, "source": c.source})

    def _batches(self, split_of: np.ndarray) -> Iterator[list[list[str]]]:
        """The documents in batches of about :attr:`BATCH_CHARS` characters, each a list per split
        (``SPLITS`` order)."""
        batch: list[list[str]] = [[] for _ in SPLITS]
        size = 0
        for doc, s in zip(self._documents(), split_of):
            batch[s].append(doc)
            size += len(doc)
            if size >= self.BATCH_CHARS:
                yield batch
                batch, size = [[] for _ in SPLITS], 0
        if size:
            yield batch

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.cache is None:
            self.prepare_data()
        assert self.cache is not None
        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_dict(self.cache.meta["tokenizer"])
        for split in SPLITS:
            self.datasets[split] = PackedBlocks(self.cache.folder / f"{split}.tokens", self.cache.dtype, self.block)
            self.documents[split] = self.cache.texts(split)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"LanguageModelDataModule: call setup() before {split}_dataloader()")
        return self._seeded_loader(self.datasets[split], shuffle, self.cfg.seed, identity_collate, split)

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
        if self.cache is None:
            raise RuntimeError("LanguageModelDataModule: call setup() first")
        return int(self.cache.meta["chars"][split])

    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable ``{"tokenizer": ..., "tokenizer_kind": ...}`` stored in checkpoints."""
        return {"tokenizer": self.tokenizer.to_dict(), "tokenizer_kind": self.tokenizer.kind}

    def stats(self) -> dict[str, Any]:
        """Documents, characters, tokens, blocks and ``<unk>`` share per split, and the training
        characters' unigram entropy in bits (what a model that ignores context can reach)."""
        if not self.datasets or self.cache is None:
            raise RuntimeError("LanguageModelDataModule: call setup() first")
        counts: Counter[str] = Counter()
        for doc in self.documents["train"]:
            counts.update(doc + "\n")
        total = sum(counts.values())
        entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
        out: dict[str, Any] = {"vocab_size": self.vocab_size, "block": self.block, "unigram_bits_per_char": entropy}
        for split in SPLITS:
            tokens = self.datasets[split].tokens
            real = int(tokens.size) - int(self.cache.meta["documents"][split])  # every token but <bos>
            out[split] = {
                "documents": len(self.documents[split]),
                "chars": self.num_chars(split),
                "tokens": real,
                "blocks": len(self.datasets[split]),
                "unk_rate": float(np.count_nonzero(tokens == UNK_ID)) / real if real else 0.0,
            }
        return out


def _joined(texts: Iterator[str], size: int) -> Iterator[str]:
    """``texts`` concatenated into pieces of about ``size`` characters."""
    batch: list[str] = []
    n = 0
    for text in texts:
        batch.append(text)
        n += len(text)
        if n >= size:
            yield "".join(batch)
            batch, n = [], 0
    if batch:
        yield "".join(batch)


def tokenizer_of(artifacts: dict[str, Any]) -> Tokenizer:
    """The tokenizer stored in a checkpoint's artifacts."""
    if not isinstance(artifacts, dict) or "tokenizer" not in artifacts:
        keys = sorted(artifacts) if isinstance(artifacts, dict) else type(artifacts).__name__
        raise ValueError(f"language-model artifacts must hold 'tokenizer'; found {keys}")
    return tokenizer_from_dict(artifacts["tokenizer"])
