"""The grpo task's ``data`` section (no Lightning here: describing the task imports it)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from attnkit.data.config import GroupColumnConfig, SourceFilesConfig

__all__ = ["GRPODataConfig"]


class GRPODataConfig(SourceFilesConfig, GroupColumnConfig):
    """Where the prompts come from and how long a prompt may be.

    Attributes:
        source: a ``.jsonl`` file or Parquet / Arrow data: ``prompt`` (text or messages), the columns rewards read.
        val_source, test_source: files of the same kind (default: ``val_fraction`` / ``test_fraction`` of
            ``source``).
        max_prompt_len: prompts longer than this many tokens keep their last ones (TRL's left truncation;
            default: the context minus ``grpo.max_completion_length``).
    """

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field(
            "", description="a .jsonl file (or Parquet/Arrow data) of prompts and the columns rewards read"
        ),
        "val_fraction": Field(0.05, ge=0.0, lt=1.0),
        "test_fraction": Field(0.05, ge=0.0, lt=1.0),
    }

    max_prompt_len: int | None = Field(
        None, ge=1, description="keep the last this many tokens of a prompt (default: context - completion room)"
    )
