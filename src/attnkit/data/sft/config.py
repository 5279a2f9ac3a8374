"""The sft task's ``data`` section (no Lightning here)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from attnkit.data.config import GroupColumnConfig, RowFilterConfig, SourceFilesConfig

__all__ = ["SFTDataConfig"]


class SFTDataConfig(SourceFilesConfig, GroupColumnConfig, RowFilterConfig):
    """Where the conversations come from and how they become batches.

    Attributes:
        source: a ``.jsonl`` file of conversations in one of the layouts of :mod:`attnkit.data.readers.chats`
            (``messages``; ``prompt`` / ``completion``; Alpaca's ``instruction`` / ``input`` / ``output``), or
            Parquet/Arrow data whose columns are those keys (:mod:`attnkit.data.readers.columnar`; its own
            validation/test splits are the run's unless ``val_source``/``test_source`` are given).
        messages_column: Parquet/Arrow: the column of the conversations' message lists (default ``messages``).
        where, sample_fraction, max_rows: the rows of Parquet/Arrow data that are read.
        val_source, test_source: files of the same kind for validation / test (default: ``val_fraction`` /
            ``test_fraction`` of ``source``, whole groups with ``group_column``).
        group_column: the key naming each conversation's group; no group is in two splits.
        max_len: conversations are cut to this many tokens (default: the model's context); the run logs how
            many were cut, and drops (and counts) those left without any assistant token.
        train_on_prompt: every token counts in the loss (default: only the assistant's, each turn's
            end-of-turn token included).
        packing: several conversations share a row (attention and positions kept inside each); default:
            one conversation a row, in batches of similar lengths (``group_by_length``).
        group_by_length: batch conversations of similar lengths together (less padding); the batches are
            shuffled. ``false``: plain shuffled batches.
    """

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field(
            "", description="a .jsonl file of conversations (messages, prompt/completion or alpaca), or Parquet/Arrow"
        ),
        "val_fraction": Field(0.05, ge=0.0, lt=1.0),
        "test_fraction": Field(0.05, ge=0.0, lt=1.0),
    }

    messages_column: str = Field(
        "messages", min_length=1, description="Parquet/Arrow: the column of the message lists ({role, content})"
    )
    max_len: int | None = Field(None, ge=2, description="cut conversations to this many tokens (default: the context)")
    train_on_prompt: bool = Field(False, description="every token counts in the loss, not only the assistant's")
    packing: bool = Field(False, description="several conversations per row (block-diagonal attention)")
    group_by_length: bool = Field(True, description="batches of conversations of similar lengths")
