"""The classify task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from attnkit.data.config import (
    GroupColumnConfig,
    RowFilterConfig,
    SourceFilesConfig,
    TextColumnConfig,
    TokenCacheConfig,
)
from attnkit.data.readers.columnar import COLUMNAR_SUFFIXES, is_columnar
from attnkit.data.readers.tables import SUPPORTED_TABLE_SUFFIXES

__all__ = ["ClassifyDataConfig", "source_kind", "table_suffixes"]


class ClassifyDataConfig(SourceFilesConfig, GroupColumnConfig, TokenCacheConfig, TextColumnConfig, RowFilterConfig):
    """Where the texts come from and how they are split and encoded.

    Attributes:
        source: ``"synthetic"`` (built-in corpus, see :func:`generate_synthetic_corpus`), a path
            to an ``aclImdb`` folder (``train/{pos,neg}/*.txt`` and ``test/{pos,neg}/*.txt``),
            a ``.csv`` / ``.tsv`` / ``.jsonl`` file, or Parquet/Arrow data (a file, a folder of shards, a
            glob, a ``save_to_disk`` folder, a Hub dataset folder; see :mod:`attnkit.data.readers.columnar`).
        text_column, label_column: columns (keys for jsonl) of table and Parquet/Arrow formats.
        where, sample_fraction, max_rows: the rows of Parquet/Arrow data that are read.
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

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field("synthetic", min_length=1),
        "vocab_size": Annotated[int, Field(20000)],
        "min_freq": 2,
    }

    label_column: str = Field("label", min_length=1)
    max_len: int = Field(256, ge=1)
    synthetic_size: int = Field(6000, ge=4)

    @model_validator(mode="after")
    def _check(self) -> ClassifyDataConfig:
        kind = source_kind(self.source)
        if kind is None:
            raise ValueError(
                f"data.source={self.source!r} is invalid: give 'synthetic', an aclImdb folder or a file ending in "
                f"{table_suffixes()} (got suffix {Path(self.source).suffix!r})"
            )
        for name in ("test_source", "val_source"):
            value = getattr(self, name)
            if value is None:
                continue
            if Path(value).suffix.lower() not in SUPPORTED_TABLE_SUFFIXES and not is_columnar(value):
                raise ValueError(f"data.{name}={value!r} is invalid: give a file ending in {table_suffixes()}")
            if kind not in ("table", "columnar"):
                raise ValueError(
                    f"data.{name}={value!r} is invalid: leave it out when source is {kind!r} (it has its own splits)"
                )
        if self.group_column is not None and kind not in ("table", "columnar"):
            raise ValueError(
                f"data.group_column={self.group_column!r} is invalid: leave it out when source is {kind!r} "
                "(groups come from a column of a table file)"
            )
        return self


def table_suffixes() -> str:
    return "/".join(SUPPORTED_TABLE_SUFFIXES + COLUMNAR_SUFFIXES)


def source_kind(source: str) -> str | None:
    """``"synthetic"``, ``"table"`` (by suffix), ``"columnar"`` (Parquet/Arrow data), ``"imdb"`` (another folder
    or a suffix-less path) or ``None``."""
    if source == "synthetic":
        return "synthetic"
    if is_columnar(source):
        return "columnar"
    path = Path(source)
    if path.suffix.lower() in SUPPORTED_TABLE_SUFFIXES:
        return "table"
    if path.is_dir() or not path.suffix:
        return "imdb"
    return None
