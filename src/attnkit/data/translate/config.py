"""The translate task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from attnkit.data.config import RowFilterConfig, SourceFilesConfig, TokenizerKindConfig
from attnkit.data.readers.columnar import is_columnar
from attnkit.data.readers.pairs import BUILTIN_SOURCE

__all__ = ["PairsDataConfig"]


class PairsDataConfig(SourceFilesConfig, TokenizerKindConfig, RowFilterConfig):
    """Where the pairs come from, how they are split and how they are tokenized (``tokenizer``
    ``"word"`` by default). ``group_column`` is a column *number* of the pairs files (a column name
    for the table formats of :class:`attnkit.data.config.GroupColumnConfig`). ``source`` may also be
    Parquet/Arrow data (:mod:`attnkit.data.readers.columnar`; its own validation/test splits are the run's
    unless ``val_source``/``test_source`` are given), its sentences in ``source_column`` and ``target_column``."""

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field(
            BUILTIN_SOURCE,
            description="'numbers' (built-in English->Spanish number pairs), a tab-separated pairs file (spa.txt) "
            "or Parquet/Arrow data",
        ),
        "vocab_size": Field(None, gt=4, description="cap per vocabulary, specials included (bpe: default 1000)"),
        "val_fraction": 0.05,
        "test_fraction": 0.05,
    }

    reverse: bool = Field(False, description="swap the columns: translate the second column into the first")
    lowercase: bool = Field(False, description="lower-case both sides before anything else")
    group_column: int | None = Field(
        None,
        ge=2,
        description="0-based column of the pairs files naming each pair's group (2: the third column); splits cut "
        "from source then hold whole groups, instead of whole source sentences",
    )
    source_column: str = Field("source", min_length=1, description="Parquet/Arrow: the column of the source sentences")
    target_column: str = Field("target", min_length=1, description="Parquet/Arrow: the column of their translations")
    skip_bad_lines: bool = Field(
        False, description="skip lines without a tab or with an empty side (one warning counts them); else an error"
    )
    shared_vocab: bool = Field(True, description="one vocabulary for both languages (needed by share_embeddings)")
    max_len: int = Field(64, gt=0, description="tokens per side (BOS/EOS excluded); see PairsDataModule")
    num_pairs: int = Field(24000, gt=0, description="built-in data: number of distinct pairs")
    sentence_fraction: float = Field(0.5, ge=0.0, le=1.0, description="built-in data: share of short sentences")
    batch_by_length: bool = Field(True, description="training batches of similar lengths (less padding)")

    @model_validator(mode="after")
    def _check(self) -> PairsDataConfig:
        if not self.source.strip():
            raise ValueError(f"data.source must be {BUILTIN_SOURCE!r} or the path of a tab-separated pairs file")
        if self.source == BUILTIN_SOURCE and self.group_column is not None:
            raise ValueError("data.group_column names a column of a pairs file; the built-in 'numbers' data has none")
        if self.group_column is not None and is_columnar(self.source):
            raise ValueError(
                "data.group_column is a column number of a tab-separated pairs file; Parquet/Arrow data is split "
                "by source sentence (or give data.val_source / data.test_source): leave it out"
            )
        return self
