"""The translate task's Lightning data module."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from attnkit.data.base import process_shard
from attnkit.data.cache import CacheWriter, entry_key, token_dtype
from attnkit.data.cached import CachedTokenDataModule
from attnkit.data.collate import chunks, collate_pairs
from attnkit.data.generators.numbers import number_pairs
from attnkit.data.readers.arrow_rows import RowFilter
from attnkit.data.readers.columnar import is_columnar, open_columnar
from attnkit.data.readers.columnar_tasks import Part, read_pair_columns, split_parts
from attnkit.data.readers.pairs import BUILTIN_SOURCE, Pair, read_pair_rows
from attnkit.data.samplers import LengthGroupedBatches
from attnkit.data.splits import SPLITS
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.dataset import (
    CachedPairs,
    EncodedPairs,
    PairSplits,
    PickedItems,
    TextPairs,
    split_pairs,
    tokenizers_from_artifacts,
)
from attnkit.text.tokenizers import BOS_ID, EOS_ID, Tokenizer, build_tokenizer

__all__ = ["PairsDataModule"]


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
    "source_column",
    "target_column",
    "where",
    "sample_fraction",
    "max_rows",
}


class PairsDataModule(CachedTokenDataModule):
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
    def load_pairs(self, path: str | Path | list[Path] | None = None) -> tuple[list[Pair], list[str] | None]:
        """The raw pairs of ``path`` (default ``data.source``; a list: Parquet/Arrow files) after ``lowercase``
        and ``reverse``, before dedup/split, and their groups (``data.source`` with ``data.group_column`` only;
        else None)."""
        cfg = self.cfg
        groups: list[str] | None = None
        if path is not None and not isinstance(path, list) and is_columnar(path):
            path = open_columnar(path).files
        if path is None and is_columnar(cfg.source):
            path = open_columnar(cfg.source).parts.get("train") or open_columnar(cfg.source).files
        if isinstance(path, list):
            pairs = read_pair_columns(path, cfg.source_column, cfg.target_column, RowFilter.of(cfg))
        elif path is None and cfg.source == BUILTIN_SOURCE:
            pairs = number_pairs(cfg.num_pairs, cfg.seed, sentence_fraction=cfg.sentence_fraction)
        else:
            group_column = cfg.group_column if path is None else None
            rows = read_pair_rows(path or cfg.source, skip_bad_lines=cfg.skip_bad_lines, group_column=group_column)
            pairs = [(s, t) for s, t, _ in rows]
            # with a group column every row has its group (a line without one is a bad line)
            groups = cast("list[str]", [g for _, _, g in rows]) if group_column is not None else None
            del rows  # its tuples: not needed at once with the pairs' (1 M pairs: 70 MB)
        if cfg.lowercase:
            pairs = [(s.lower(), t.lower()) for s, t in pairs]
        if cfg.reverse:
            pairs = [(t, s) for s, t in pairs]
        return pairs, groups

    # -------------------------------------------------------------- the token cache
    cache_task = "translate"

    def cached(self) -> bool:
        """Whether this data goes through the token cache (a pairs file source)."""
        return self.cfg.source != BUILTIN_SOURCE

    def _cache_config(self, given: bool) -> dict[str, Any]:
        """The data config fields that change the encoded splits, with the given tokenizers (or the
        options they are built with)."""
        config = self.cfg.model_dump(include=_ENCODING_FIELDS)
        if given and self._tokenizers is not None:
            src, tgt = self._tokenizers
            config["tokenizers"] = [entry_key(src.to_dict()), None if tgt is src else entry_key(tgt.to_dict())]
            for name in ("tokenizer", "shared_vocab", "vocab_size", "min_freq"):
                config.pop(name)
        return config

    def _given_meta(self) -> dict[str, Any] | None:
        if self._tokenizers is None:
            return None
        src, tgt = self._tokenizers
        return {"src_tokenizer": src.to_dict(), "tgt_tokenizer": None if tgt is src else tgt.to_dict()}

    def setup(self, stage: str | None = None) -> None:
        if not self.datasets:
            super().setup(stage)
            self._warn_lengths()

    def _load_in_memory(self) -> None:
        splits, self._tokenizers = self._load()
        self.splits = splits
        for split in SPLITS:
            self._encode(split, getattr(splits, split))

    def _load(self) -> tuple[PairSplits, tuple[Tokenizer, Tokenizer]]:
        """The split pairs, and the tokenizers (built on the training split unless given)."""
        cfg = self.cfg
        pairs, groups = self.load_pairs()
        parts: dict[str, Part] = split_parts(cfg.source, cfg.val_source, cfg.test_source)[1]
        given = {split: self.load_pairs(part)[0] for split, part in parts.items()}
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

    def _encode(self, split: str, pairs: Sequence[Pair]) -> None:
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
            parts[split] = TextPairs(sources, targets)
            kept = cache.array(f"{split}.kept")
            refs = targets if len(kept) == len(targets) else PickedItems(targets, kept)
            self.datasets[split] = CachedPairs(cache.rows(f"{split}.src"), cache.rows(f"{split}.tgt"), refs)
        self.splits = PairSplits(**parts)

    def _build_tokenizers(self, train: Sequence[Pair]) -> tuple[Tokenizer, Tokenizer]:
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
            batches = LengthGroupedBatches(lengths, self.batch_size, self.cfg.seed, num_replicas=world, rank=rank)
            return StatefulDataLoader(dataset, batch_sampler=batches, **common)  # resumes mid-epoch
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
