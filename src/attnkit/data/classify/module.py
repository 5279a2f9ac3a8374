"""The classify task's Lightning data module."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader

from attnkit.data.cache import CacheWriter, entry_key, token_dtype
from attnkit.data.cached import CachedTokenDataModule
from attnkit.data.classify.config import ClassifyDataConfig, source_kind
from attnkit.data.classify.dataset import ENCODE_BATCH, CachedTextDataset, EncodedTextDataset, encode_texts
from attnkit.data.classify.splits import load_splits, remap_labels
from attnkit.data.collate import chunks, collate_text_batch, pad_sequences
from attnkit.data.readers.columnar import is_columnar, open_columnar
from attnkit.data.readers.columnar_tasks import read_labelled
from attnkit.data.readers.tables import read_table
from attnkit.data.splits import SPLITS, TextSplits
from attnkit.text.tokenizers import Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = ["TextClassificationDataModule"]


class TextClassificationDataModule(CachedTokenDataModule):
    """Text classification splits as padded batches.

    ``setup()`` loads the data once, builds the tokenizer on the *training* texts (unless one is
    given, e.g. restored from a checkpoint with :meth:`from_artifacts`) and encodes every split
    to at most ``cfg.max_len`` tokens. A text with no token at all encodes to ``[unk_id]`` so that
    no row is fully masked. Batches: ``(ids [B, T] int64, mask [B, T] bool, labels [B] int64)``,
    ``T`` = longest sequence in the batch, ``mask`` True at real tokens, ``ids == pad_id`` elsewhere.

    A table source (csv/tsv/jsonl, with its ``val_source``/``test_source``) goes through the token
    cache (:mod:`attnkit.data.cache`): ``prepare_data()`` (one process per node under DDP) splits
    and encodes it once into a cache entry (per split: memory-mapped token ids and offsets, the
    texts, the labels as ``.npy``), ``setup()`` opens it, and a second run on the same files and
    config reuses it. The datasets read their examples from the memory map, and ``splits`` holds
    lazy sequences of the cached texts. The built-in synthetic corpus and aclImdb folders (small)
    are encoded in memory on every run, as are :meth:`for_test_file`'s texts.

    With ``label_names`` given, the data's labels are mapped to those ids by name (all of the
    data's label names must be among them).

    The module's ``state_dict()`` is :meth:`artifacts`, so Lightning stores the vocabulary in
    checkpoints; ``load_state_dict`` restores it (re-encoding if already set up).

    ``tokenizer`` may also be a pretrained model's tokenizer (kind ``"pretrained"``, fine-tuning a
    pretrained encoder): its ids include the model's special tokens and it pads with its pad id.
    """

    def __init__(
        self,
        cfg: ClassifyDataConfig,
        batch_size: int = 32,
        num_workers: int = 0,
        tokenizer: Tokenizer | None = None,
        label_names: list[str] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if label_names is not None and (not label_names or len(set(label_names)) != len(label_names)):
            raise ValueError(f"label_names must be non-empty and unique, got {label_names!r}")
        self.cfg = cfg
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._tokenizer = tokenizer
        self._label_names = [str(n) for n in label_names] if label_names is not None else None
        self.splits: TextSplits | None = None
        self.datasets: dict[str, EncodedTextDataset | CachedTextDataset] = {}

    @classmethod
    def from_artifacts(
        cls, cfg: ClassifyDataConfig, artifacts: dict[str, Any], batch_size: int = 32, num_workers: int = 0
    ) -> TextClassificationDataModule:
        """A module that reuses the tokenizer and label names saved by :meth:`artifacts`."""
        tokenizer, label_names, max_len = _parse_artifacts(artifacts)
        if max_len != cfg.max_len:
            cfg = cfg.model_copy(update={"max_len": max_len})
        return cls(cfg, batch_size, num_workers, tokenizer=tokenizer, label_names=label_names)

    @classmethod
    def for_test_file(
        cls, cfg: ClassifyDataConfig, artifacts: dict[str, Any], path: str | Path, batch_size: int = 32
    ) -> TextClassificationDataModule:
        """A module whose test split is the whole table file (or Parquet/Arrow data) ``path`` (``cfg``'s text and label
        columns), encoded with the run's tokenizer; labels are matched to the run's by name."""
        dm = cls.from_artifacts(cfg, artifacts, batch_size)
        if is_columnar(path):
            texts, raw, _ = read_labelled(open_columnar(path).files, cfg.text_column, cfg.label_column)
        else:
            texts, raw = read_table(path, cfg.text_column, cfg.label_column)
        names = dm.label_names
        unknown = sorted({str(y) for y in raw} - set(names))
        if unknown:
            raise ValueError(f"{path}: label(s) {unknown[:10]} are not among this run's labels {names}")
        labels = [names.index(str(y)) for y in raw]
        dm.splits = TextSplits([], [], [], [], texts, labels, names)
        dm._encode_all()
        return dm

    # -------------------------------------------------------------- the token cache
    cache_task = "classify"

    def cached(self) -> bool:
        """Whether this data goes through the token cache (a table source)."""
        return source_kind(self.cfg.source) in ("table", "columnar")

    def _cache_config(self, given: bool) -> dict[str, Any]:
        """The data config fields that change the encoded splits, with the given tokenizer (or the
        options it is built with) and label names."""
        config = self.cfg.model_dump(exclude={"source", "val_source", "test_source", "cache_dir", "synthetic_size"})
        if given and self._tokenizer is not None:
            config["tokenizer"] = entry_key(self._tokenizer.to_dict())
            config.pop("vocab_size"), config.pop("min_freq")
        config["label_names"] = self._label_names if given else None
        return config

    def _given_meta(self) -> dict[str, Any] | None:
        if self._tokenizer is None:
            return None
        return {"tokenizer": self._tokenizer.to_dict(), "label_names": self._label_names}

    def _load_in_memory(self) -> None:
        splits, self._tokenizer = self._load()
        self._label_names = list(splits.label_names)
        self.splits = splits
        self._encode_all()

    def _load(self) -> tuple[TextSplits, Tokenizer]:
        """The checked splits, and the tokenizer (built on the training texts unless given)."""
        splits = load_splits(self.cfg)
        if not splits.train_texts:
            raise ValueError(f"data.source={self.cfg.source!r}: the training split is empty")
        if self._label_names is not None:
            splits = remap_labels(splits, self._label_names)
        num_classes = len(splits.label_names)
        if num_classes < 2:
            raise ValueError(f"data.source={self.cfg.source!r}: need at least 2 classes, found {splits.label_names!r}")
        for split in SPLITS:
            for i, y in enumerate(getattr(splits, f"{split}_labels")):
                if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < num_classes:
                    raise ValueError(
                        f"{split} label {y!r} at index {i} is out of range [0, {num_classes}) "
                        f"(label_names={splits.label_names!r})"
                    )
        tokenizer = self._tokenizer
        if tokenizer is None:
            tokenizer = build_tokenizer(
                "text", splits.train_texts, vocab_size=self.cfg.vocab_size, min_freq=self.cfg.min_freq
            )
        return splits, tokenizer

    def _build_cache(self, folder: Path) -> None:
        splits, tokenizer = self._load()
        writer = CacheWriter(folder, SPLITS, token_dtype(tokenizer.vocab_size))
        try:
            for split in SPLITS:
                texts = getattr(splits, f"{split}_texts")
                writer.add_texts(split, ())  # an empty split has an empty file too
                for batch in chunks(texts, 16 * ENCODE_BATCH):
                    writer.add_rows(split, encode_texts(tokenizer, batch, self.cfg.max_len))
                    writer.add_texts(split, batch)
                writer.save_array(f"{split}.labels", np.asarray(getattr(splits, f"{split}_labels"), dtype=np.int64))
        except BaseException:
            writer.abort()
            raise
        writer.finish({"tokenizer": tokenizer.to_dict(), "label_names": list(splits.label_names)})

    def _open_cache(self) -> None:
        cache = self.cache
        assert cache is not None
        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_dict(cache.meta["tokenizer"])
        self._label_names = [str(n) for n in cache.meta["label_names"]]
        texts: dict[str, Sequence[str]] = {}
        labels: dict[str, list[int]] = {}
        for split in SPLITS:
            labels[split] = cache.array(f"{split}.labels").tolist()
            self.datasets[split] = CachedTextDataset(cache.rows(split), labels[split])
            texts[split] = cache.texts(split)
        self.splits = TextSplits(
            texts["train"],
            labels["train"],
            texts["val"],
            labels["val"],
            texts["test"],
            labels["test"],
            label_names=list(self._label_names),
        )

    def _encode_all(self) -> None:
        assert self.splits is not None
        self.datasets = {
            split: EncodedTextDataset(
                self._encode_many(getattr(self.splits, f"{split}_texts")), list(getattr(self.splits, f"{split}_labels"))
            )
            for split in SPLITS
        }

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        return encode_texts(self.tokenizer, texts, self.cfg.max_len)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"TextClassificationDataModule: call setup() before {split}_dataloader()")
        collate = partial(collate_text_batch, pad_id=self.pad_id)
        return self._seeded_loader(self.datasets[split], shuffle, self.cfg.seed, collate, split)

    def state_dict(self) -> dict[str, Any]:
        return self.artifacts() if self._tokenizer is not None and self._label_names is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        tokenizer, label_names, max_len = _parse_artifacts(state_dict)
        changed = tokenizer != self._tokenizer or label_names != self._label_names or max_len != self.cfg.max_len
        if max_len != self.cfg.max_len:
            self.cfg = self.cfg.model_copy(update={"max_len": max_len})
        if self.cache is not None:  # cached splits: reopened (built first when new) with these artifacts
            self._tokenizer, self._label_names = tokenizer, label_names
            if changed:
                self.splits, self.cache, self._folder, self.datasets = None, None, None, {}
                self.setup()
            return
        if self.splits is not None:
            self.splits = remap_labels(self.splits, label_names)
        self._tokenizer, self._label_names = tokenizer, label_names
        if self.splits is not None and changed:
            self._encode_all()

    # -------------------------------------------------------------- properties
    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise RuntimeError("TextClassificationDataModule: the tokenizer is built by setup(); call it first")
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        pad_id = self._tokenizer.pad_id if self._tokenizer is not None else None
        return 0 if pad_id is None else pad_id  # <pad> of the "text" layout

    @property
    def max_len(self) -> int:
        return self.cfg.max_len

    @property
    def label_names(self) -> list[str]:
        if self._label_names is None:
            raise RuntimeError("TextClassificationDataModule: label_names are known after setup(); call it first")
        return list(self._label_names)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    # -------------------------------------------------------------- prediction / export
    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable ``{"tokenizer": ..., "label_names": [...], "max_len": int}``."""
        return {"tokenizer": self.tokenizer.to_dict(), "label_names": self.label_names, "max_len": self.max_len}

    def encode_texts(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """``(ids [N, T] int64, mask [N, T] bool)`` for raw texts, encoded like the training data."""
        if isinstance(texts, str):
            raise TypeError("encode_texts expects a list of texts, got a single str")
        return pad_sequences(self._encode_many(list(texts)), self.pad_id)

    def stats(self) -> dict[str, Any]:
        """Split sizes, class counts, share of ``<unk>`` tokens and of truncated texts (after setup)."""
        if self.splits is None:
            raise RuntimeError("TextClassificationDataModule: call setup() first")
        out: dict[str, Any] = {"vocab_size": self.vocab_size, "num_classes": self.num_classes, "max_len": self.max_len}
        unk = self.tokenizer.unk_id
        for split, ds in self.datasets.items():
            n_tokens = sum(len(s) for s in ds.ids)
            n_unk = sum(s.count(unk) for s in ds.ids)
            n_trunc = sum(len(s) == self.max_len for s in ds.ids)
            counts = Counter(ds.labels)
            out[split] = {
                "size": len(ds),
                "class_counts": {name: counts.get(i, 0) for i, name in enumerate(self.label_names)},
                "unk_rate": n_unk / n_tokens if n_tokens else 0.0,
                "truncated_rate": n_trunc / len(ds) if len(ds) else 0.0,
                "mean_len": n_tokens / len(ds) if len(ds) else 0.0,
            }
        return out


def _parse_artifacts(artifacts: dict[str, Any]) -> tuple[Tokenizer, list[str], int]:
    missing = [k for k in ("tokenizer", "label_names", "max_len") if k not in artifacts]
    if missing:
        raise ValueError(f"text data artifacts are missing {missing}; keys present: {sorted(artifacts)}")
    return (
        tokenizer_from_dict(artifacts["tokenizer"]),
        [str(n) for n in artifacts["label_names"]],
        int(artifacts["max_len"]),
    )
