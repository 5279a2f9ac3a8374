"""The lm task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from attnkit.data.config import RowFilterConfig, SplitSourceConfig, TextColumnConfig, TokenizerKindConfig

__all__ = ["BUILTIN", "LMDataConfig"]

BUILTIN = "grammar"


class LMDataConfig(SplitSourceConfig, TokenizerKindConfig, TextColumnConfig, RowFilterConfig):
    """Where the text comes from, how it is cut into documents and tokenized.

    Attributes:
        source: ``"grammar"`` (the built-in generated corpus, :func:`generate_grammar_corpus`), the
            path of a plain UTF-8 text file, a folder (every ``*.txt`` file in it, recursively) or a
            glob of text files (``"corpus/*.txt"``); files are read in sorted path order. Or Parquet/Arrow
            data (a file, a folder of shards, a glob, a ``save_to_disk`` folder, a Hub dataset folder;
            :mod:`attnkit.data.readers.columnar`): every row's ``text_column`` is a document, streamed a
            record batch at a time; the source's own ``validation``/``test`` splits, when its layout names
            them, are the run's (``val_fraction``/``test_fraction`` cut only the splits it lacks).
        text_column: Parquet/Arrow: the column of the documents (default ``text``).
        where, sample_fraction, max_rows: the rows of Parquet/Arrow data that are read.
        split_on: ``"blank_line"`` (default: a document is a paragraph; blank or whitespace-only
            lines separate documents) or ``"line"`` (every non-blank line is a document).
        tokenizer: ``"char"`` (default), ``"word"`` or ``"bpe"`` (see :mod:`attnkit.text.tokenizers`).
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

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field(
            BUILTIN,
            min_length=1,
            description="'grammar', a UTF-8 text file, a folder of *.txt files, a glob, or Parquet/Arrow data",
        ),
        "tokenizer": "char",
        "vocab_size": Field(None, ge=5, description="vocabulary cap, specials included (>= 260 for bpe)"),
        "val_fraction": Field(0.05, gt=0.0),
        "test_fraction": Field(0.05, gt=0.0),
    }

    split_on: Literal["blank_line", "line"] = "blank_line"
    builtin_documents: int = Field(6000, ge=3)
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
        return self
