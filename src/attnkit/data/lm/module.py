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
from typing import Any

import numpy as np
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from attnkit.data.cache import CachedTexts, CacheWriter, content_digest, token_dtype
from attnkit.data.cached import CachedTokenDataModule
from attnkit.data.collate import identity_collate
from attnkit.data.encode import encode_batches, tokenize_workers
from attnkit.data.generators.grammar import generate_grammar_corpus
from attnkit.data.lm.blocks import PackedBlocks, artifacts_of, tokenizer_of
from attnkit.data.lm.config import BUILTIN, LMDataConfig
from attnkit.data.readers.arrow_rows import RowFilter
from attnkit.data.readers.columnar import ALL, ColumnarSource, is_columnar, open_columnar
from attnkit.data.readers.columnar_tasks import iter_texts
from attnkit.data.readers.text_files import corpus_files, iter_documents
from attnkit.data.splits import SPLITS, TEST, TRAIN, VAL, fraction_split
from attnkit.text.framing import document_bounds
from attnkit.text.tokenizers import UNK_ID, Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = ["LanguageModelDataModule"]


class LanguageModelDataModule(CachedTokenDataModule):
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

    # -------------------------------------------------------------- the token cache
    cache_task = "lm"
    BATCH_CHARS = 1 << 21  # documents are tokenized in batches of about this many characters

    def _cache_sources(self, root: Path) -> Any:
        c = self.cfg
        if c.source == BUILTIN:
            return {"builtin": BUILTIN, "documents": c.builtin_documents}
        return [content_digest(p, root) for p in self._files()]

    def _columnar(self) -> ColumnarSource | None:
        """The Parquet/Arrow source (its files and splits), or None for text files and the built-in corpus."""
        c = self.cfg
        return open_columnar(c.source) if c.source != BUILTIN and is_columnar(c.source) else None

    def _files(self) -> list[Path]:
        """The files of ``data.source`` (none for the built-in corpus)."""
        if self.cfg.source == BUILTIN:
            return []
        columnar = self._columnar()
        return columnar.files if columnar is not None else corpus_files(self.cfg.source)

    def _cache_config(self, given: bool) -> dict[str, Any]:
        config = self.cfg.model_dump(exclude={"source", "cache_dir", "tokenize_workers"})
        if given and self._tokenizer is not None:
            config["tokenizer"] = hashlib.blake2b(self._tokenizer.backend.to_str().encode(), digest_size=16).hexdigest()
            config.pop("vocab_size"), config.pop("min_freq")
        if self.test_only:
            config["test_only"] = True
        return config

    def _given_meta(self) -> dict[str, Any] | None:
        """A given tokenizer (a trained run's): the entry of the run that built it from these
        options is used when it holds that tokenizer."""
        if self._tokenizer is None or self.test_only:
            return None
        return {"tokenizer": self._tokenizer.to_dict()}

    def _documents(self) -> Iterator[str]:
        """Every document, in order (a Parquet/Arrow source with splits: train's, then val's, then test's)."""
        return itertools.chain.from_iterable(docs for _, docs in self._parts())

    def _parts(self) -> list[tuple[str, Iterator[str]]]:
        """The documents of each part of the source: ``"all"``, or the splits a Parquet/Arrow source names."""
        c = self.cfg
        if c.source == BUILTIN:
            return [(ALL, iter(generate_grammar_corpus(c.builtin_documents, c.seed)))]
        columnar = self._columnar()
        if columnar is None:
            return [(ALL, iter_documents(corpus_files(c.source), c.split_on))]
        return [
            (s, iter_texts(columnar.parts[s], c.text_column, RowFilter.of(c)))
            for s in (ALL, *SPLITS)
            if s in columnar.parts
        ]

    def _split_of(self, sizes: dict[str, int]) -> np.ndarray:
        """The split of each document, from the documents of each part (:meth:`_parts`): the source's own
        splits, and held-out shares of its training documents for the splits it lacks."""
        c = self.cfg
        if ALL in sizes:
            return fraction_split(sizes[ALL], c.val_fraction, c.test_fraction, c.seed, minimum=1)
        for split in SPLITS:
            if split in sizes and sizes[split] == 0:
                raise ValueError(
                    f"data.source={c.source!r}: its {split} split has no document (no non-blank {c.text_column!r} "
                    "row, after data.where / data.sample_fraction / data.max_rows); fill it or remove it"
                )
        n_train = sizes["train"]
        train = fraction_split(
            n_train, 0.0 if "val" in sizes else c.val_fraction, 0.0 if "test" in sizes else c.test_fraction, c.seed,
            minimum=1,
        )  # fmt: skip
        return np.concatenate(
            [train, np.full(sizes.get("val", 0), VAL, np.int8), np.full(sizes.get("test", 0), TEST, np.int8)]
        )

    def _build_cache(self, folder: Path) -> None:
        c = self.cfg
        total_chars = 0
        sizes: dict[str, int] = {}
        for part, part_docs in self._parts():
            sizes[part] = 0
            for doc in part_docs:
                sizes[part] += 1
                total_chars += len(doc)
        n = sum(sizes.values())
        if self.test_only:
            if n == 0:
                raise ValueError(f"{c.source}: the file is empty (no non-blank text); nothing to evaluate")
            split_of = np.full(n, TEST, dtype=np.int8)
        elif n < 3:
            if n == 0:
                filtered = c.where or c.sample_fraction is not None or c.max_rows is not None
                why = " after data.where / data.sample_fraction / data.max_rows" if filtered else ""
                raise ValueError(
                    f"data.source={c.source!r}: the corpus is empty (no non-blank text{why}); nothing to train on"
                )
            advice = " (or data.split_on=line to make every line a document)" if c.split_on == "blank_line" else ""
            raise ValueError(
                f"data.source={c.source!r} has {n} document(s); at least 3 are needed (train, val and test each get "
                f"whole documents): separate documents by blank lines{advice}"
            )
        else:
            split_of = self._split_of(sizes)
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
        # Parquet/Arrow files are compressed: their text's size decides (characters, about its UTF-8 bytes)
        nbytes = total_chars if self._columnar() is not None else sum(p.stat().st_size for p in self._files())
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
        documents = {s: len(text_lengths[s]) for s in SPLITS}
        writer.finish({"tokenizer": tokenizer.to_dict(), "chars": chars, "documents": documents, "source": c.source})

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

    def _open_cache(self) -> None:
        assert self.cache is not None
        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_dict(self.cache.meta["tokenizer"])
        bos, _ = document_bounds(self._tokenizer)
        for split in SPLITS:
            self.datasets[split] = PackedBlocks(
                self.cache.folder / f"{split}.tokens", self.cache.dtype, self.block, bos_id=bos
            )
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
        return artifacts_of(self.tokenizer)

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
        unk = UNK_ID if not self.tokenizer.spec.pretrained else self.tokenizer.unk_id
        out: dict[str, Any] = {"vocab_size": self.vocab_size, "block": self.block, "unigram_bits_per_char": entropy}
        for split in SPLITS:
            tokens = self.datasets[split].tokens
            starts = int(self.cache.meta["documents"][split]) if self.datasets[split].bos_id is not None else 0
            real = int(tokens.size) - starts  # every token but <bos>
            out[split] = {
                "documents": len(self.documents[split]),
                "chars": self.num_chars(split),
                "tokens": real,
                "blocks": len(self.datasets[split]),
                "unk_rate": float(np.count_nonzero(tokens == unk)) / real if real and unk is not None else 0.0,
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
