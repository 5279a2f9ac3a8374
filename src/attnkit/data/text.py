"""Text classification data: loaders (aclImdb, csv/tsv/jsonl, a built-in synthetic corpus),
a word tokenizer and a Lightning data module.

Batches are ``(ids [B, T] int64, mask [B, T] bool, labels [B] int64)`` where ``T`` is the
longest sequence of the batch (at most ``max_len``) and ``mask`` is True at real tokens.
Nothing is downloaded: IMDB must already be unpacked on disk (``aclImdb/``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attnkit.data.base import DataConfig, SplitDataModule, chunks
from attnkit.data.cache import (
    CachedRows,
    CacheWriter,
    TokenCache,
    cache_root,
    entry_key,
    open_or_build,
    reuse_entry,
    source_digests,
    token_dtype,
)
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.readers.tables import SUPPORTED_TABLE_SUFFIXES, read_column, read_table
from attnkit.data.splits import SPLITS, group_split, stratified_split
from attnkit.data.tokenizers import PAD, UNK, Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = [
    "PAD",
    "SUPPORTED_TABLE_SUFFIXES",
    "UNK",
    "ClassifyDataConfig",
    "EncodedTextDataset",
    "TextClassificationDataModule",
    "TextSplits",
    "collate_text_batch",
    "encode_texts",
    "generate_synthetic_corpus",
    "load_imdb",
    "load_splits",
    "load_table",
    "pad_sequences",
    "read_column",
    "read_table",
    "source_kind",
    "stratified_split",
]

IMDB_LABEL_NAMES: list[str] = ["negative", "positive"]  # folder neg -> 0, pos -> 1


# ====================================================================== config
class ClassifyDataConfig(DataConfig):
    """Where the texts come from and how they are split and encoded.

    Attributes:
        source: ``"synthetic"`` (built-in corpus, see :func:`generate_synthetic_corpus`), a path
            to an ``aclImdb`` folder (``train/{pos,neg}/*.txt`` and ``test/{pos,neg}/*.txt``),
            or a ``.csv`` / ``.tsv`` / ``.jsonl`` file.
        text_column, label_column: columns (keys for jsonl) of table formats.
        test_source: separate test file for table formats; without it a stratified
            ``test_fraction`` of ``source`` is held out.
        val_source: separate validation file for table formats (it picks the best checkpoint);
            without it a stratified ``val_fraction`` of ``source`` is held out.
        group_column: table formats: a column naming each row's group (e.g. its source
            document). The splits cut from ``source`` then hold whole groups: no group is in
            two splits (see :func:`attnkit.data.splits.group_split`), still stratified by label.
        max_len: tokens kept per text (truncated at the end).
        vocab_size: vocabulary size including ``<pad>`` and ``<unk>``.
        min_freq: words seen fewer times in the training texts map to ``<unk>``.
        val_fraction: stratified share held out for validation (of the training data for
            aclImdb / with ``test_source``, of the whole file or corpus otherwise).
        test_fraction: share held out for test, only when the source has no test split.
        seed: seeds the splits, the synthetic corpus and the training-set shuffling.
        synthetic_size: documents in the built-in corpus.
        cache_dir: where a table source's encoded splits are cached (default ``$ATTNKIT_CACHE`` or
            ``~/.cache/attnkit``; see :mod:`attnkit.data.cache`).
    """

    source: str = Field("synthetic", min_length=1)
    text_column: str = Field("text", min_length=1)
    label_column: str = Field("label", min_length=1)
    test_source: str | None = None
    val_source: str | None = None
    group_column: str | None = Field(None, min_length=1)
    max_len: int = Field(256, ge=1)
    vocab_size: int = Field(20000, ge=3)
    min_freq: int = Field(2, ge=1)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    seed: int = 42
    synthetic_size: int = Field(6000, ge=4)
    cache_dir: str | None = Field(None, description="token cache folder (default $ATTNKIT_CACHE or ~/.cache/attnkit)")

    @model_validator(mode="after")
    def _check(self) -> ClassifyDataConfig:
        kind = source_kind(self.source)
        if kind is None:
            raise ValueError(
                f"data.source={self.source!r} is invalid: give 'synthetic', an aclImdb folder or a file ending in "
                f"{_suffixes()} (got suffix {Path(self.source).suffix!r})"
            )
        for name in ("test_source", "val_source"):
            value = getattr(self, name)
            if value is None:
                continue
            if Path(value).suffix.lower() not in SUPPORTED_TABLE_SUFFIXES:
                raise ValueError(f"data.{name}={value!r} is invalid: give a file ending in {_suffixes()}")
            if kind != "table":
                raise ValueError(
                    f"data.{name}={value!r} is invalid: leave it out when source is {kind!r} (it has its own splits)"
                )
        if self.group_column is not None and kind != "table":
            raise ValueError(
                f"data.group_column={self.group_column!r} is invalid: leave it out when source is {kind!r} "
                "(groups come from a column of a table file)"
            )
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be below 1, got {self.val_fraction} + {self.test_fraction}"
            )
        return self


def _suffixes() -> str:
    return "/".join(SUPPORTED_TABLE_SUFFIXES)


def source_kind(source: str) -> str | None:
    """``"synthetic"``, ``"table"`` (by suffix), ``"imdb"`` (a folder or a suffix-less path) or ``None``."""
    if source == "synthetic":
        return "synthetic"
    path = Path(source)
    if path.suffix.lower() in SUPPORTED_TABLE_SUFFIXES:
        return "table"
    if path.is_dir() or not path.suffix:
        return "imdb"
    return None


# ====================================================================== splits
@dataclass
class TextSplits:
    """Raw texts and integer labels (``0 .. len(label_names) - 1``) of the three splits."""

    train_texts: list[str]
    train_labels: list[int]
    val_texts: list[str]
    val_labels: list[int]
    test_texts: list[str]
    test_labels: list[int]
    label_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for split in ("train", "val", "test"):
            n_texts, n_labels = len(getattr(self, f"{split}_texts")), len(getattr(self, f"{split}_labels"))
            if n_texts != n_labels:
                raise ValueError(f"TextSplits: {split} has {n_texts} texts but {n_labels} labels")

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def sizes(self) -> dict[str, int]:
        """Number of texts per split."""
        return {"train": len(self.train_texts), "val": len(self.val_texts), "test": len(self.test_texts)}


def _take(items: Sequence[Any], idx: Sequence[int]) -> list[Any]:
    return [items[i] for i in idx]


# ====================================================================== aclImdb
def load_imdb(root: str | Path, *, val_fraction: float = 0.1, seed: int = 42) -> TextSplits:
    """Load the unpacked Large Movie Review Dataset (``aclImdb``).

    Expects ``root/train/{neg,pos}/*.txt`` and ``root/test/{neg,pos}/*.txt`` (``root`` may also
    be the folder that contains ``aclImdb/``). Labels: ``neg`` -> 0 (``"negative"``),
    ``pos`` -> 1 (``"positive"``). ``train/unsup`` (unlabelled) is ignored. Validation is a seeded
    stratified ``val_fraction`` of train. Files are read in sorted name order.
    """
    root = Path(root)
    if not (root / "train").is_dir() and (root / "aclImdb" / "train").is_dir():
        root = root / "aclImdb"
    if not root.is_dir():
        raise FileNotFoundError(f"aclImdb folder {root} does not exist")
    data: dict[str, tuple[list[str], list[int]]] = {}
    for split in ("train", "test"):
        texts: list[str] = []
        labels: list[int] = []
        for label, sub in enumerate(("neg", "pos")):
            folder = root / split / sub
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"aclImdb layout: missing folder {folder} "
                    f"(expected {root}/train/{{neg,pos}}/*.txt and {root}/test/{{neg,pos}}/*.txt)"
                )
            files = sorted(folder.glob("*.txt"))
            if not files:
                raise ValueError(f"aclImdb layout: folder {folder} has no .txt files")
            for path in files:
                text = path.read_text(encoding="utf-8", errors="replace")
                if not text.strip():
                    raise ValueError(f"{path}: empty review")
                texts.append(text)
                labels.append(label)
        data[split] = (texts, labels)
    train_texts, train_labels = data["train"]
    keep, (val_idx,) = stratified_split(train_labels, [val_fraction], seed)
    return TextSplits(
        train_texts=_take(train_texts, keep),
        train_labels=_take(train_labels, keep),
        val_texts=_take(train_texts, val_idx),
        val_labels=_take(train_labels, val_idx),
        test_texts=data["test"][0],
        test_labels=data["test"][1],
        label_names=list(IMDB_LABEL_NAMES),
    )


_INT_RE = re.compile(r"[+-]?\d+")


def _map_labels(raw: Sequence[Any], where: str) -> tuple[list[int], list[str]]:
    """Raw labels -> ``(ids, label_names)``.

    All integer-like (ints or digit strings): kept as ids, which must be ``0 .. K-1``.
    Otherwise: string labels, ids in sorted order of the names.
    """
    if all(isinstance(v, int) or _INT_RE.fullmatch(v) for v in raw):
        ids = [int(v) for v in raw]
        present = sorted(set(ids))
        if present != list(range(len(present))):
            raise ValueError(
                f"{where}: integer labels must be the class ids 0..K-1, found {present[:20]}; "
                "remap them or use string labels (mapped to ids in sorted order of the names)"
            )
        return ids, [str(i) for i in present]
    names = sorted({str(v) for v in raw})
    index = {name: i for i, name in enumerate(names)}
    return [index[str(v)] for v in raw], names


def load_table(
    path: str | Path,
    text_column: str = "text",
    label_column: str = "label",
    *,
    test_path: str | Path | None = None,
    val_path: str | Path | None = None,
    group_column: str | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 42,
) -> TextSplits:
    """Splits from a ``.csv``/``.tsv``/``.jsonl`` file (see :func:`read_table` for the format).

    String labels map to ids in sorted order of the names (over all files); integer labels are
    kept (``label_names`` are their ``str``) and must be ``0 .. K-1``. ``test_path`` /
    ``val_path`` give the test / validation split as files; the splits not given are held out of
    ``path``, stratified: ``val_fraction`` and ``test_fraction`` of it. With ``group_column`` (a
    column of ``path``) they hold whole groups (:func:`attnkit.data.splits.group_split`).
    """
    texts, raw = read_table(path, text_column, label_column)
    given = {
        name: read_table(p, text_column, label_column) for name, p in (("val", val_path), ("test", test_path)) if p
    }
    where = " + ".join(str(p) for p in (path, val_path, test_path) if p)
    ids, names = _map_labels(raw + [y for _, labels in given.values() for y in labels], where)
    labels, start = ids[: len(raw)], len(raw)
    out: dict[str, tuple[list[str], list[int]]] = {}
    for name, (split_texts, split_raw) in given.items():
        out[name] = (split_texts, ids[start : start + len(split_raw)])
        start += len(split_raw)
    held = [name for name in ("val", "test") if name not in given]
    fractions = [val_fraction if name == "val" else test_fraction for name in held]
    if group_column is not None:
        groups = read_column(path, group_column)
        where = f"{path} (groups of column {group_column!r})"
        keep, *parts = (list(idx) for idx in group_split(groups, fractions, seed, stratify=labels, where=where))
    else:
        keep, parts = stratified_split(labels, fractions, seed)
    for name, idx in zip(held, parts):
        out[name] = (_take(texts, idx), _take(labels, idx))
    return TextSplits(
        train_texts=_take(texts, keep),
        train_labels=_take(labels, keep),
        val_texts=out["val"][0],
        val_labels=out["val"][1],
        test_texts=out["test"][0],
        test_labels=out["test"][1],
        label_names=names,
    )


# ====================================================================== dispatch
def load_splits(cfg: ClassifyDataConfig) -> TextSplits:
    """The splits described by ``cfg`` (synthetic corpus, aclImdb folder or table file)."""
    kind = source_kind(cfg.source)
    if kind == "synthetic":
        texts, labels, names = generate_synthetic_corpus(cfg.synthetic_size, cfg.seed)
        keep, (val_idx, test_idx) = stratified_split(labels, [cfg.val_fraction, cfg.test_fraction], cfg.seed)
        return TextSplits(
            _take(texts, keep),
            _take(labels, keep),
            _take(texts, val_idx),
            _take(labels, val_idx),
            _take(texts, test_idx),
            _take(labels, test_idx),
            names,
        )
    if kind == "imdb":
        return load_imdb(cfg.source, val_fraction=cfg.val_fraction, seed=cfg.seed)
    if kind == "table":
        return load_table(
            cfg.source,
            cfg.text_column,
            cfg.label_column,
            test_path=cfg.test_source,
            val_path=cfg.val_source,
            group_column=cfg.group_column,
            val_fraction=cfg.val_fraction,
            test_fraction=cfg.test_fraction,
            seed=cfg.seed,
        )
    raise ValueError(f"data.source={cfg.source!r}: not 'synthetic', a folder or a {_suffixes()} file")


# ====================================================================== dataset / collate
class EncodedTextDataset(Dataset):
    """Pre-encoded texts: item ``i`` is ``(ids: list[int], label: int)``."""

    def __init__(self, ids: list[list[int]], labels: list[int]) -> None:
        if len(ids) != len(labels):
            raise ValueError(f"{type(self).__name__}: {len(ids)} sequences but {len(labels)} labels")
        self.ids = ids
        self.labels = labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[list[int], int]:
        return self.ids[index], self.labels[index]


class CachedTextDataset(EncodedTextDataset):
    """Texts encoded in the token cache: item ``i`` is ``(ids: list[int], label: int)``, read from
    the memory-mapped split (``ids`` is the lazy sequence of every text's ids)."""

    ids: CachedRows


ENCODE_BATCH = 4096  # texts per Hugging Face encode_batch call


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Every text's ids, at most ``max_len`` (cut at the end); a text with no token is ``[unk_id]``
    (no row is fully masked). The same ids as ``tokenizer.encode(text, max_len)`` one by one (tested),
    in parallel batches (Hugging Face ``encode_batch``) except for pretrained tokenizers, whose
    special tokens are added after the cut."""
    out: list[list[int]] = []
    for batch in chunks(texts, ENCODE_BATCH):
        if tokenizer.kind == "pretrained":
            encoded = [tokenizer.encode(t, max_len) for t in batch]
        else:
            encoded = [ids[:max_len] for ids in tokenizer.encode_batch(list(batch))]
        out += [ids if ids else [tokenizer.unk_id] for ids in encoded]
    return out


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``(ids [B, T] int64, mask [B, T] bool)`` with ``T`` the longest sequence; True = real token."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    width = int(lengths.max()) if len(seqs) else 0
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        if len(s):
            ids[row, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    return ids, mask


def collate_text_batch(batch: Sequence[tuple[Sequence[int], int]], pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """``[(ids, label), ...]`` -> ``(ids [B, T] int64, mask [B, T] bool, labels [B] int64)``,
    padded with ``pad_id`` to the longest sequence of the batch."""
    ids, mask = pad_sequences([item[0] for item in batch], pad_id)
    labels = torch.tensor([int(item[1]) for item in batch], dtype=torch.long)
    return ids, mask, labels


# ====================================================================== data module
class TextClassificationDataModule(SplitDataModule):
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
        self.cache: TokenCache | None = None
        self._folder: Path | None = None

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
        """A module whose test split is the whole table file ``path`` (``cfg``'s text and label
        columns), encoded with the run's tokenizer; labels are matched to the run's by name."""
        dm = cls.from_artifacts(cfg, artifacts, batch_size)
        texts, raw = read_table(path, cfg.text_column, cfg.label_column)
        names = dm.label_names
        unknown = sorted({str(y) for y in raw} - set(names))
        if unknown:
            raise ValueError(f"{path}: label(s) {unknown[:10]} are not among this run's labels {names}")
        labels = [names.index(str(y)) for y in raw]
        dm.splits = TextSplits([], [], [], [], texts, labels, names)
        dm._encode_all()
        return dm

    # -------------------------------------------------------------- lightning hooks
    def cached(self) -> bool:
        """Whether this data goes through the token cache (a table source)."""
        return source_kind(self.cfg.source) == "table"

    def cache_folder(self) -> Path:
        """Where this data's cache entry is: its key hashes the table files' contents, the
        tokenizer (or the options it is built with), the given label names and the data config
        fields that change the encoded splits. Given a run's tokenizer and labels, the entry that run
        built is used when it holds them (:func:`attnkit.data.cache.reuse_entry`)."""
        if self._folder is None:
            tok, names = self._tokenizer, self._label_names
            self._folder = self._key_folder(tok, names)
            if tok is not None:
                meta = {"tokenizer": tok.to_dict(), "label_names": names}
                self._folder = reuse_entry(self._folder, self._key_folder(None, None), meta)
        return self._folder

    def _key_folder(self, tokenizer: Tokenizer | None, label_names: list[str] | None) -> Path:
        c = self.cfg
        root = cache_root(c.cache_dir)
        sources = source_digests({name: getattr(c, name) for name in ("source", "val_source", "test_source")}, root)
        config = c.model_dump(exclude={"source", "val_source", "test_source", "cache_dir", "synthetic_size"})
        if tokenizer is not None:
            config["tokenizer"] = entry_key(tokenizer.to_dict())
            config.pop("vocab_size"), config.pop("min_freq")
        config["label_names"] = label_names
        return root / "classify" / entry_key({"sources": sources, "config": config, "format": 1})

    def prepare_data(self) -> None:
        """A table source: build the token cache unless it exists (nothing is downloaded); once
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
            return
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
            splits = _remap_labels(splits, self._label_names)
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
        parts: list[Any] = []
        for split in SPLITS:
            labels = cache.array(f"{split}.labels").tolist()
            self.datasets[split] = CachedTextDataset(cache.rows(split), labels)
            parts += [cache.texts(split), labels]
        self.splits = TextSplits(*parts, label_names=list(self._label_names))

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
            self.splits = _remap_labels(self.splits, label_names)
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


def _remap_labels(splits: TextSplits, label_names: list[str]) -> TextSplits:
    """Relabel ``splits`` so that ids follow ``label_names`` (matched by name)."""
    if list(splits.label_names) == list(label_names):
        return splits
    unknown = [n for n in splits.label_names if n not in label_names]
    if unknown:
        raise ValueError(
            f"the data has label(s) {unknown} that are not among the given label_names {label_names} "
            f"(data label_names: {splits.label_names})"
        )
    index = {name: i for i, name in enumerate(label_names)}
    to_new = [index[name] for name in splits.label_names]

    def remap(labels: list[int]) -> list[int]:
        return [to_new[y] if isinstance(y, int) and 0 <= y < len(to_new) else y for y in labels]

    return TextSplits(
        splits.train_texts,
        remap(splits.train_labels),
        splits.val_texts,
        remap(splits.val_labels),
        splits.test_texts,
        remap(splits.test_labels),
        list(label_names),
    )
