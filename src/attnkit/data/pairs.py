"""Sentence pairs for translation: tab-separated files (Tatoeba / Anki) or built-in English->Spanish numbers.

A pairs file has one pair per line, ``source<TAB>target[<TAB>anything else...]``, UTF-8, as the
Anki/ManyThings ``spa.txt`` (whose third column is the Tatoeba attribution; extra columns are
ignored). Batches are ``(src [B, Ts], src_mask [B, Ts], tgt_in [B, Tt], tgt_out [B, Tt], index [B])``:
``src`` is the source tokens + EOS, ``tgt_in`` is BOS + target tokens and ``tgt_out`` is target
tokens + EOS (teacher forcing), padded with ``PAD_ID``; masks are True at real tokens; ``index``
numbers the pairs within their split (``datamodule.datasets[split].refs[index]`` is the target
text, for BLEU). Nothing is downloaded.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attnkit.data.base import DataConfig, SplitDataModule, chunks, process_shard
from attnkit.data.cache import (
    CachedRows,
    CachedTexts,
    CacheWriter,
    LazySequence,
    TokenCache,
    cache_root,
    entry_key,
    open_or_build,
    reuse_entry,
    source_digests,
    token_dtype,
)
from attnkit.data.generators.numbers import english_number, number_pairs, spanish_number
from attnkit.data.readers.pairs import BUILTIN_SOURCE, Pair, read_pair_rows, read_pairs
from attnkit.data.splits import SPLITS, group_split
from attnkit.data.text import pad_sequences
from attnkit.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = [
    "BUILTIN_SOURCE",
    "PairSplits",
    "PairsDataConfig",
    "PairsDataModule",
    "TranslationBatch",
    "collate_pairs",
    "english_number",
    "number_pairs",
    "read_pair_rows",
    "read_pairs",
    "spanish_number",
    "split_pairs",
]


_CHUNK = 16384  # pairs encoded at once when building the cache
# the config fields that change a pairs file's encoded splits (the cache key)
_ENCODING_FIELDS = {
    "reverse",
    "lowercase",
    "group_column",
    "skip_bad_lines",
    "tokenizer",
    "shared_vocab",
    "vocab_size",
    "min_freq",
    "max_len",
    "val_fraction",
    "test_fraction",
    "seed",
}


# ====================================================================== config
class PairsDataConfig(DataConfig):
    """Where the pairs come from, how they are split and how they are tokenized."""

    source: str = Field(
        BUILTIN_SOURCE,
        description="'numbers' (built-in English->Spanish number pairs) or a tab-separated pairs file (spa.txt)",
    )
    reverse: bool = Field(False, description="swap the columns: translate the second column into the first")
    lowercase: bool = Field(False, description="lower-case both sides before anything else")
    val_source: str | None = Field(
        None, description="a pairs file for validation (picks the best checkpoint); default: val_fraction of source"
    )
    test_source: str | None = Field(
        None, description="a pairs file for the test split; default: test_fraction of source"
    )
    group_column: int | None = Field(
        None,
        ge=2,
        description="0-based column of the pairs files naming each pair's group (2: the third column); splits cut "
        "from source then hold whole groups, instead of whole source sentences",
    )
    skip_bad_lines: bool = Field(
        False, description="skip lines without a tab or with an empty side (one warning counts them); else an error"
    )
    tokenizer: Literal["char", "word", "bpe"] = "word"
    shared_vocab: bool = Field(True, description="one vocabulary for both languages (needed by share_embeddings)")
    vocab_size: int | None = Field(None, gt=4, description="cap per vocabulary, specials included (bpe: default 1000)")
    min_freq: int = Field(1, ge=1, description="pieces seen fewer times in the training split become <unk>")
    max_len: int = Field(64, gt=0, description="tokens per side (BOS/EOS excluded); see PairsDataModule")
    val_fraction: float = Field(0.05, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.05, ge=0.0, lt=1.0)
    seed: int = Field(42, description="seeds the split and the built-in generator")
    num_pairs: int = Field(24000, gt=0, description="built-in data: number of distinct pairs")
    sentence_fraction: float = Field(0.5, ge=0.0, le=1.0, description="built-in data: share of short sentences")
    batch_by_length: bool = Field(True, description="training batches of similar lengths (less padding)")
    cache_dir: str | None = Field(None, description="token cache folder (default $ATTNKIT_CACHE or ~/.cache/attnkit)")

    @model_validator(mode="after")
    def _check(self) -> PairsDataConfig:
        if not self.source.strip():
            raise ValueError(f"data.source must be {BUILTIN_SOURCE!r} or the path of a tab-separated pairs file")
        if self.source == BUILTIN_SOURCE and self.group_column is not None:
            raise ValueError("data.group_column names a column of a pairs file; the built-in 'numbers' data has none")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be below 1, got {self.val_fraction} + {self.test_fraction}"
            )
        if self.tokenizer == "bpe" and self.vocab_size is not None and self.vocab_size < 260:
            raise ValueError(
                f"a bpe vocabulary needs vocab_size >= 260 (4 specials + 256 bytes), got {self.vocab_size}"
            )
        return self


@dataclass
class PairSplits:
    """Deduplicated ``(source, target)`` pairs of the three splits."""

    train: list[Pair]
    val: list[Pair]
    test: list[Pair]

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def split_pairs(
    pairs: Sequence[Pair], val_fraction: float, test_fraction: float, seed: int, *, groups: Sequence[str] | None = None
) -> PairSplits:
    """Remove duplicate pairs (first kept), then split by *source sentence* with ``seed``.

    All translations of one source sentence (Tatoeba often has several) go to the same split, so
    no test source is seen in training: the groups of :func:`attnkit.data.splits.group_split` are
    the source sentences, or, with ``groups`` (one per pair; a duplicate keeps its first pair's),
    those groups. Validation and test get about ``fraction`` of the (deduplicated) *pairs* each;
    pairs keep their file order within a split.
    """
    unique = list(dict.fromkeys(pairs))
    if groups is None:
        group_of = [source for source, _ in unique]
    else:
        first: dict[Pair, str] = {}
        for pair, group in zip(pairs, groups):
            first.setdefault(pair, group)
        group_of = [first[pair] for pair in unique]
    parts = group_split(group_of, [val_fraction, test_fraction], seed)
    out = {name: [unique[i] for i in idx] for name, idx in zip(SPLITS, parts)}
    return PairSplits(**out)


# ====================================================================== batches
class EncodedPairs(Dataset):
    """Item ``i``: ``(source ids + EOS, BOS + target ids + EOS, i)``; ``refs[i]`` is the target text."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]], refs: list[str]) -> None:
        self.src, self.tgt, self.refs = src, tgt, refs

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> tuple[list[int], list[int], int]:
        return self.src[index], self.tgt[index], index

    def lengths(self) -> list[int]:
        """Source + target tokens of every pair (what length-bucketed batches sort by)."""
        return [len(s) + len(t) for s, t in zip(self.src, self.tgt)]


class CachedPairs(EncodedPairs):
    """:class:`EncodedPairs` read from the token cache: ``src``/``tgt`` are lazy sequences of the
    memory-mapped ids, ``refs`` of the cached target texts."""

    src: CachedRows
    tgt: CachedRows

    def lengths(self) -> list[int]:
        return (self.src.lengths() + self.tgt.lengths()).tolist()


class _Pairs(LazySequence):
    """``(source, target)`` text pairs read lazily from two cached text files."""

    def __init__(self, sources: CachedTexts, targets: CachedTexts) -> None:
        self.sources, self.targets = sources, targets

    def __len__(self) -> int:
        return len(self.sources)

    def _get(self, index: int) -> Pair:
        return self.sources[index], self.targets[index]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return zip(self.sources, self.targets)


class _Picked(LazySequence):
    """Items ``index`` of a sequence."""

    def __init__(self, items: Sequence[Any], index: np.ndarray) -> None:
        self.items, self.index = items, index

    def __len__(self) -> int:
        return len(self.index)

    def _get(self, index: int) -> Any:
        return self.items[int(self.index[index])]


TranslationBatch = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def collate_pairs(items: Sequence[tuple[list[int], list[int], int]]) -> TranslationBatch:
    """Pad encoded pairs into ``(src, src_mask, tgt_in, tgt_out, index)`` (see the module docstring)."""
    src, src_mask = pad_sequences([s for s, _, _ in items], PAD_ID)
    tgt, _ = pad_sequences([t for _, t, _ in items], PAD_ID)
    tgt_out = tgt[:, 1:].clone()
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == EOS_ID, PAD_ID)  # EOS is never a decoder input
    return src, src_mask, tgt_in, tgt_out, torch.tensor([i for _, _, i in items], dtype=torch.long)


class _LengthBatches(torch.utils.data.Sampler[list[int]]):
    """Shuffled batches of similar-length examples: sort within random pools of 50 batches, then
    shuffle the batches. The order depends on ``seed`` and the epoch (Lightning calls
    :meth:`set_epoch`; otherwise every pass counts as the next epoch).

    With ``num_replicas`` processes every process draws the same batches and takes every
    ``num_replicas``-th (from its ``rank``), all processes the same number: the last
    ``len % num_replicas`` batches of the epoch's order are left out, so no process waits for a
    batch another one lacks."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} out of range for {num_replicas} processes")
        if self._count(len(lengths), batch_size) < num_replicas:
            raise ValueError(
                f"the training split has {len(lengths)} pairs, fewer batches of trainer.batch_size={batch_size} than "
                f"the {num_replicas} processes: lower trainer.batch_size or trainer.devices"
            )
        self.lengths, self.batch_size, self.seed, self.epoch = lengths, batch_size, seed, 0
        self.num_replicas, self.rank = num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rng = random.Random(self.seed * 1000003 + self.epoch)
        self.epoch += 1
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        pool = self.batch_size * 50
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        rng.shuffle(batches)
        return iter(batches[self.rank : len(self) * self.num_replicas : self.num_replicas])

    @staticmethod
    def _count(size: int, batch_size: int) -> int:
        """Batches of one epoch over all processes."""
        pool = batch_size * 50
        full, rest = divmod(size, pool)
        return full * 50 + -(-rest // batch_size)

    def __len__(self) -> int:
        return self._count(len(self.lengths), self.batch_size) // self.num_replicas


# ====================================================================== data module
class PairsDataModule(SplitDataModule):
    """Translation pairs as padded batches (:class:`TranslationBatch`).

    ``setup()`` reads the pairs (``data.source``), lower-cases them if asked, swaps the columns
    with ``reverse``, deduplicates and splits them (:func:`split_pairs`), builds the tokenizer(s)
    on the *training* split only (one shared by both languages, or one per language) unless they
    come from a checkpoint (:meth:`from_artifacts`), and encodes every split.

    A pairs file source (with its ``val_source``/``test_source``) goes through the token cache
    (:mod:`attnkit.data.cache`): ``prepare_data()`` (one process per node under DDP) does the above
    once, in batches, into a cache entry (per split: memory-mapped source and target ids with their
    offsets, the pairs' texts, the indices of the training pairs kept), ``setup()`` opens it, and a
    second run on the same files and config reuses it. The datasets read their pairs from the
    memory map; ``splits`` and ``refs`` are lazy sequences of the cached texts. The built-in
    ``numbers`` data (generated, small) and :meth:`for_test_file`'s pairs are encoded in memory.

    Lengths: a training pair with more than ``max_len`` tokens on either side is left out (a cut
    translation would teach wrong output); a warning counts them. Validation and test pairs are
    all kept: their token ids are cut to ``max_len`` for the teacher-forced loss (a warning counts
    them), while BLEU, chrF and exact match compare the decoded output with the full reference
    text.
    """

    def __init__(
        self,
        cfg: PairsDataConfig,
        batch_size: int = 64,
        num_workers: int = 0,
        tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._tokenizers = tokenizers
        self.splits: PairSplits | None = None
        self.datasets: dict[str, EncodedPairs] = {}
        self.dropped: dict[str, int] = {}
        self.cache: TokenCache | None = None
        self._folder: Path | None = None

    @classmethod
    def from_artifacts(
        cls, cfg: PairsDataConfig, artifacts: dict[str, Any], batch_size: int = 64, num_workers: int = 0
    ) -> PairsDataModule:
        """A module that reuses the tokenizers saved by :meth:`artifacts`."""
        return cls(cfg, batch_size, num_workers, tokenizers=tokenizers_from_artifacts(artifacts))

    @classmethod
    def for_test_file(
        cls, cfg: PairsDataConfig, artifacts: dict[str, Any], path: str | Path, batch_size: int = 64
    ) -> PairsDataModule:
        """A module whose test split is every pair of the file ``path`` (prepared as ``cfg`` says:
        ``lowercase``, ``reverse``), encoded with the run's tokenizers."""
        dm = cls.from_artifacts(cfg, artifacts, batch_size)
        dm.splits = PairSplits([], [], dm.load_pairs(path)[0])
        dm._encode("test", dm.splits.test)
        return dm

    # -------------------------------------------------------------- loading
    def load_pairs(self, path: str | Path | None = None) -> tuple[list[Pair], list[str] | None]:
        """The raw pairs of ``path`` (default ``data.source``) after ``lowercase`` and ``reverse``,
        before dedup/split, and their groups (``data.source`` with ``data.group_column`` only; else None)."""
        cfg = self.cfg
        groups: list[str] | None = None
        if path is None and cfg.source == BUILTIN_SOURCE:
            pairs = number_pairs(cfg.num_pairs, cfg.seed, sentence_fraction=cfg.sentence_fraction)
        else:
            group_column = cfg.group_column if path is None else None
            rows = read_pair_rows(path or cfg.source, skip_bad_lines=cfg.skip_bad_lines, group_column=group_column)
            pairs = [(s, t) for s, t, _ in rows]
            groups = [g for _, _, g in rows] if group_column is not None else None  # type: ignore[misc]
            del rows  # its tuples: not needed at once with the pairs' (1 M pairs: 70 MB)
        if cfg.lowercase:
            pairs = [(s.lower(), t.lower()) for s, t in pairs]
        if cfg.reverse:
            pairs = [(t, s) for s, t in pairs]
        return pairs, groups

    # -------------------------------------------------------------- the cache
    def cached(self) -> bool:
        """Whether this data goes through the token cache (a pairs file source)."""
        return self.cfg.source != BUILTIN_SOURCE

    def cache_folder(self) -> Path:
        """Where this data's cache entry is: its key hashes the pairs files' contents, the
        tokenizers (or the options they are built with) and the data config fields that change
        the encoded splits. Given a run's tokenizers, the entry that run built is used when it holds
        them (:func:`attnkit.data.cache.reuse_entry`)."""
        if self._folder is None:
            self._folder = self._key_folder(self._tokenizers)
            if self._tokenizers is not None:
                src, tgt = self._tokenizers
                meta = {"src_tokenizer": src.to_dict(), "tgt_tokenizer": None if tgt is src else tgt.to_dict()}
                self._folder = reuse_entry(self._folder, self._key_folder(None), meta)
        return self._folder

    def _key_folder(self, tokenizers: tuple[Tokenizer, Tokenizer] | None) -> Path:
        c = self.cfg
        root = cache_root(c.cache_dir)
        sources = source_digests({name: getattr(c, name) for name in ("source", "val_source", "test_source")}, root)
        config = c.model_dump(include=_ENCODING_FIELDS)
        if tokenizers is not None:
            src, tgt = tokenizers
            config["tokenizers"] = [entry_key(src.to_dict()), None if tgt is src else entry_key(tgt.to_dict())]
            for name in ("tokenizer", "shared_vocab", "vocab_size", "min_freq"):
                config.pop(name)
        return root / "translate" / entry_key({"sources": sources, "config": config, "format": 1})

    def prepare_data(self) -> None:
        """A pairs file source: build the token cache unless it exists (nothing is downloaded); once
        opened (and checked), it is not opened again."""
        if self.cached() and (self.cache is None or self.cache.folder != self.cache_folder()):
            self.cache = open_or_build(self.cache_folder(), self._build_cache)

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        if self.cached():
            if self.cache is None:
                self.prepare_data()
            self._open_cache()
        else:
            splits, self._tokenizers = self._load()
            self.splits = splits
            for split in SPLITS:
                self._encode(split, getattr(splits, split))
        self._warn_lengths()

    def _load(self) -> tuple[PairSplits, tuple[Tokenizer, Tokenizer]]:
        """The split pairs, and the tokenizers (built on the training split unless given)."""
        cfg = self.cfg
        pairs, groups = self.load_pairs()
        given = {
            split: self.load_pairs(path)[0]
            for split, path in (("val", cfg.val_source), ("test", cfg.test_source))
            if path
        }
        val_fraction = 0.0 if "val" in given else cfg.val_fraction
        test_fraction = 0.0 if "test" in given else cfg.test_fraction
        splits = split_pairs(pairs, val_fraction, test_fraction, cfg.seed, groups=groups)
        del pairs, groups
        for split, split_pairs_ in given.items():
            setattr(splits, split, list(dict.fromkeys(split_pairs_)))
        if not splits.train:
            raise ValueError(f"data.source={cfg.source!r}: the training split is empty")
        return splits, self._tokenizers or self._build_tokenizers(splits.train)

    def _warn_lengths(self) -> None:
        cfg = self.cfg
        if not len(self.datasets["train"]):
            raise ValueError(f"data: every training pair is longer than data.max_len={cfg.max_len}; raise it")
        if self.dropped["train"]:
            assert self.splits is not None
            warnings.warn(
                f"data: left out {self.dropped['train']} of {len(self.splits.train)} training pairs longer than "
                f"data.max_len={cfg.max_len} tokens",
                stacklevel=3,
            )
        cut = self.dropped["val"] + self.dropped["test"]
        if cut:
            warnings.warn(
                f"data: {cut} validation/test pairs are longer than data.max_len={cfg.max_len} tokens; their loss "
                "uses the first max_len tokens, BLEU the whole reference",
                stacklevel=3,
            )

    def _encode_pairs(
        self, pairs: Sequence[Pair], train: bool
    ) -> tuple[list[list[int]], list[list[int]], list[int], int]:
        """``(source ids + EOS, BOS + target ids + EOS, indices kept, pairs over max_len)``: with
        ``train`` pairs over ``max_len`` tokens are left out, else cut (batched ``encode_batch``,
        the same ids as ``encode`` one by one)."""
        cfg = self.cfg
        src_tok, tgt_tok = self.tokenizers
        src = src_tok.encode_batch([s for s, _ in pairs])
        tgt = tgt_tok.encode_batch([t for _, t in pairs])
        too_long = [max(len(s), len(t)) > cfg.max_len for s, t in zip(src, tgt)]
        keep = [i for i, long in enumerate(too_long) if not (train and long)]
        if len(keep) < len(pairs):
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        src = [[*s[: cfg.max_len], EOS_ID] for s in src]
        tgt = [[BOS_ID, *t[: cfg.max_len], EOS_ID] for t in tgt]
        return src, tgt, keep, sum(too_long)

    def _encode(self, split: str, pairs: list[Pair]) -> None:
        """Encode ``pairs`` as ``datasets[split]`` in memory (see :meth:`_encode_pairs`)."""
        src, tgt, keep, self.dropped[split] = self._encode_pairs(pairs, split == "train")
        self.datasets[split] = EncodedPairs(src, tgt, [pairs[i][1] for i in keep])

    def _build_cache(self, folder: Path) -> None:
        splits, self._tokenizers = self._load()
        src_tok, tgt_tok = self._tokenizers
        streams = [f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]
        writer = CacheWriter(folder, streams, token_dtype(max(src_tok.vocab_size, tgt_tok.vocab_size)))
        dropped = dict.fromkeys(SPLITS, 0)
        try:
            for split in SPLITS:
                pairs = getattr(splits, split)
                kept: list[np.ndarray] = [np.zeros(0, np.int64)]
                writer.add_texts(f"{split}.source", ())  # an empty split has empty files too
                writer.add_texts(f"{split}.target", ())
                for start, batch in zip(range(0, len(pairs), _CHUNK), chunks(pairs, _CHUNK)):
                    src, tgt, keep, n_long = self._encode_pairs(batch, split == "train")
                    dropped[split] += n_long
                    writer.add_rows(f"{split}.src", src)
                    writer.add_rows(f"{split}.tgt", tgt)
                    writer.add_texts(f"{split}.source", (s for s, _ in batch))
                    writer.add_texts(f"{split}.target", (t for _, t in batch))
                    kept.append(start + np.asarray(keep, dtype=np.int64))
                writer.save_array(f"{split}.kept", np.concatenate(kept))
                if split == "train" and dropped[split] == len(pairs):
                    raise ValueError(
                        f"data: every training pair is longer than data.max_len={self.cfg.max_len}; raise it"
                    )
        except BaseException:
            writer.abort()
            raise
        meta = {**self.artifacts(), "dropped": dropped}
        writer.finish(meta)

    def _open_cache(self) -> None:
        cache = self.cache
        assert cache is not None
        if self._tokenizers is None:
            self._tokenizers = tokenizers_from_artifacts(cache.meta)
        self.dropped = {split: int(n) for split, n in cache.meta["dropped"].items()}
        parts = {}
        for split in SPLITS:
            sources, targets = cache.texts(f"{split}.source"), cache.texts(f"{split}.target")
            parts[split] = _Pairs(sources, targets)
            kept = cache.array(f"{split}.kept")
            refs = targets if len(kept) == len(targets) else _Picked(targets, kept)
            self.datasets[split] = CachedPairs(cache.rows(f"{split}.src"), cache.rows(f"{split}.tgt"), refs)
        self.splits = PairSplits(**parts)

    def _build_tokenizers(self, train: list[Pair]) -> tuple[Tokenizer, Tokenizer]:
        cfg = self.cfg
        build = partial(build_tokenizer, cfg.tokenizer, vocab_size=cfg.vocab_size, min_freq=cfg.min_freq)
        if cfg.shared_vocab:
            shared = build([s for s, _ in train] + [t for _, t in train])
            return shared, shared
        return build([s for s, _ in train]), build([t for _, t in train])

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"PairsDataModule: call setup() before {split}_dataloader()")
        dataset = self.datasets[split]
        common: dict[str, Any] = dict(
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0, collate_fn=collate_pairs
        )
        if shuffle and self.cfg.batch_by_length:
            lengths = dataset.lengths()
            world, rank = process_shard(self)
            batches = _LengthBatches(lengths, self.batch_size, self.cfg.seed, num_replicas=world, rank=rank)
            return DataLoader(dataset, batch_sampler=batches, **common)
        return self._seeded_loader(dataset, shuffle, self.cfg.seed, collate_pairs, split)

    # -------------------------------------------------------------- properties / export
    @property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """``(source tokenizer, target tokenizer)`` (the same object when the vocabulary is shared)."""
        if self._tokenizers is None:
            raise RuntimeError("PairsDataModule: the tokenizers are built by setup(); call it first")
        return self._tokenizers

    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable ``{"src_tokenizer": ..., "tgt_tokenizer": ... or None if shared, "max_len": int}``."""
        src, tgt = self.tokenizers
        return {
            "src_tokenizer": src.to_dict(),
            "tgt_tokenizer": None if tgt is src else tgt.to_dict(),
            "max_len": self.cfg.max_len,
        }

    def stats(self) -> dict[str, Any]:
        """Split sizes, vocabulary sizes and the share of ``<unk>`` tokens per split (after setup)."""
        if self.splits is None:
            raise RuntimeError("PairsDataModule: call setup() first")
        src, tgt = self.tokenizers
        out: dict[str, Any] = {"src_vocab_size": src.vocab_size, "tgt_vocab_size": tgt.vocab_size}
        for split, ds in self.datasets.items():
            n_src = sum(len(s) - 1 for s in ds.src)
            n_tgt = sum(len(t) - 2 for t in ds.tgt)
            out[split] = {
                "pairs": len(ds),
                "src_unk": sum(s.count(src.unk_id) for s in ds.src) / max(n_src, 1),
                "tgt_unk": sum(t.count(tgt.unk_id) for t in ds.tgt) / max(n_tgt, 1),
                "over_max_len": self.dropped.get(split, 0),
            }
        return out


def tokenizers_from_artifacts(artifacts: dict[str, Any]) -> tuple[Tokenizer, Tokenizer]:
    """``(source, target)`` tokenizers from :meth:`PairsDataModule.artifacts` (the same object if shared)."""
    if not isinstance(artifacts, dict) or "src_tokenizer" not in artifacts:
        raise ValueError("translation artifacts must hold 'src_tokenizer' (and 'tgt_tokenizer', None when shared)")
    src = tokenizer_from_dict(artifacts["src_tokenizer"])
    tgt = src if artifacts.get("tgt_tokenizer") is None else tokenizer_from_dict(artifacts["tgt_tokenizer"])
    return src, tgt
