"""The ``data`` section of every task's config: each shared field declared once, here.

A task's data config inherits the groups of fields it uses and adds only its own fields:

* :class:`DataConfig`: strict validation and the ``seed`` (every task);
* :class:`SplitSourceConfig`: ``source`` and the held-out ``val_fraction``/``test_fraction``;
* :class:`SourceFilesConfig`: ``val_source``/``test_source``, splits given as files;
* :class:`GroupColumnConfig`: ``group_column``, the table column that keeps groups in one split;
* :class:`TokenCacheConfig`: ``vocab_size``, ``min_freq`` and the token cache's ``cache_dir``;
* :class:`TokenizerKindConfig`: ``tokenizer``, one of the registered trainable kinds
  (:data:`attnkit.text.tokenizers.TOKENIZER_KINDS`);
* :class:`TextColumnConfig`: ``text_column``, the column of the texts in a table or Parquet/Arrow source;
* :class:`RowFilterConfig`: ``where``, ``sample_fraction`` and ``max_rows``, the rows of a Parquet/Arrow
  source that are read (:mod:`attnkit.data.readers.arrow_rows`).

A task whose default or bounds differ from the shared ones says so in ``field_overrides``
(:class:`attnkit.config.StrictModel`); the field itself is not declared again. Nothing here imports Lightning.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from attnkit.config import StrictModel
from attnkit.data.readers.columnar import is_columnar
from attnkit.text.tokenizer_kinds import TOKENIZER_KINDS, kind_names

__all__ = [
    "DataConfig",
    "GroupColumnConfig",
    "RowFilterConfig",
    "SourceFilesConfig",
    "SplitSourceConfig",
    "TextColumnConfig",
    "TokenCacheConfig",
    "TokenizerKindConfig",
    "TrainableKind",
]

# The tokenizer kinds a data config may choose: the registered kinds built from the user's texts
# with the fixed generation specials (not "text", the classifier's layout, nor "pretrained"). A Literal
# built from the registry when the program runs (pydantic checks it); a type checker sees a str.
if TYPE_CHECKING:
    TrainableKind = str
else:
    TrainableKind = Literal[kind_names(trainable=True, generation=True)]


class DataConfig(StrictModel):
    """The base of the ``data`` section of every task: pydantic in strict mode, unknown keys
    rejected. Strict because a data value of the wrong type is almost always a mistake that lax
    coercion would hide (``set_size: true`` would become 1, ``standardize: 1`` True): ``"1"`` is not
    an int and ``1`` not a bool. Command-line overrides and YAML files arrive typed (``seq_len=8`` is
    the int 8). Path fields (``source`` ...) also accept a ``pathlib.Path`` (stored as ``str``)."""

    model_config = ConfigDict(strict=True)

    seed: int = Field(42, description="seeds the splits, generated data and the training order")

    @field_validator("*", mode="before")
    @classmethod
    def _paths_as_strings(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value


class SplitSourceConfig(DataConfig):
    """A ``source`` cut into train/val/test: what is not given as a split is held out of it."""

    fractions_rule: ClassVar[str] = "below 1"  # how the sum check's message words the bound

    source: str = Field("", description="where the data comes from (see each task)")
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of source held out for validation")
    test_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of source held out for test")

    @model_validator(mode="after")
    def _check_fractions(self) -> SplitSourceConfig:
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be {self.fractions_rule}, got "
                f"{self.val_fraction} + {self.test_fraction}"
            )
        return self


class SourceFilesConfig(SplitSourceConfig):
    """Validation and test splits given as files of the source's format."""

    val_source: str | None = Field(
        None, description="a file for validation (picks the best checkpoint); default: val_fraction of source"
    )
    test_source: str | None = Field(None, description="a file for the test split; default: test_fraction of source")


class GroupColumnConfig(DataConfig):
    """Splits cut from the source keep groups whole (:func:`attnkit.data.splits.group_split`)."""

    group_column: str | None = Field(
        None, min_length=1, description="the column naming each item's group; no group is in two splits"
    )


class TokenCacheConfig(DataConfig):
    """A vocabulary built on the training split, and where the encoded splits are cached."""

    vocab_size: int | None = Field(None, ge=3, description="vocabulary cap, specials included")
    min_freq: int = Field(1, ge=1, description="pieces seen fewer times in the training split become <unk>")
    cache_dir: str | None = Field(None, description="token cache folder (default $ATTNKIT_CACHE or ~/.cache/attnkit)")


class TokenizerKindConfig(TokenCacheConfig):
    """A tokenizer of a registered trainable kind (see :mod:`attnkit.text.tokenizers`)."""

    tokenizer: TrainableKind = "word"

    @model_validator(mode="after")
    def _check_vocab(self) -> TokenizerKindConfig:
        kind = TOKENIZER_KINDS.get(self.tokenizer)
        if kind.min_vocab is not None and self.vocab_size is not None and self.vocab_size < kind.min_vocab:
            raise ValueError(
                f"a {self.tokenizer} vocabulary needs vocab_size >= {kind.min_vocab} ({len(kind.specials)} specials "
                f"+ {kind.min_vocab - len(kind.specials)} bytes), got {self.vocab_size}"
            )
        return self


class TextColumnConfig(DataConfig):
    """The texts are a column of the source (a table file, or Parquet/Arrow data)."""

    text_column: str = Field("text", min_length=1, description="the column (jsonl: key) holding the texts")


class RowFilterConfig(DataConfig):
    """Which rows of a Parquet/Arrow ``source`` (and ``val_source`` / ``test_source``) are read: those whose
    columns equal ``where``'s values, then a seeded ``sample_fraction`` of them, then the first ``max_rows``
    (each applied to every file set read: the source, or each of its splits)."""

    where: dict[str, str | int | float | bool] | None = Field(
        None, description="Parquet/Arrow: keep the rows whose columns equal these values ({lang: en})"
    )
    sample_fraction: float | None = Field(
        None, gt=0.0, le=1.0, description="Parquet/Arrow: keep this share of the rows, drawn with the seed"
    )
    max_rows: int | None = Field(None, ge=1, description="Parquet/Arrow: read at most this many rows")

    @model_validator(mode="after")
    def _check_filters(self) -> RowFilterConfig:
        asked = [n for n in ("where", "sample_fraction", "max_rows") if getattr(self, n) is not None]
        if self.where is not None and not self.where:
            raise ValueError("data.where is empty; give {column: value, ...} or leave it out")
        sources = [getattr(self, n, None) for n in ("source", "val_source", "test_source")]
        if asked and not any(is_columnar(s) for s in sources if s):
            raise ValueError(
                f"data.{asked[0]} filters the rows of Parquet/Arrow data; data.source={sources[0]!r} is not "
                "Parquet/Arrow: leave it out, or convert the data (e.g. pandas: read_csv(...).to_parquet(...))"
            )
        return self
