"""The dpo and kto tasks' ``data`` section (no Lightning here)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from attnkit.data.config import GroupColumnConfig, SourceFilesConfig

__all__ = ["PreferenceDataConfig"]


class PreferenceDataConfig(SourceFilesConfig, GroupColumnConfig):
    """Where the preference data comes from (:mod:`attnkit.data.preference.read`) and how long it may be.

    Attributes:
        source: a ``.jsonl`` file or Parquet / Arrow data: ``prompt`` / ``chosen`` / ``rejected`` pairs (dpo; text
            or messages, or ``chosen`` / ``rejected`` conversations alone), or ``prompt`` / ``completion`` /
            ``label`` (kto).
        val_source, test_source: files of the same kind (default: ``val_fraction`` / ``test_fraction`` of
            ``source``, whole groups with ``group_column``).
        max_len: each prompt with its completion is cut to this many tokens (default: the model's context); the
            run logs how many were cut, and drops (and counts) the records whose prompt alone fills it.
    """

    field_overrides: ClassVar[dict[str, Any]] = {
        "source": Field(
            "",
            description="a .jsonl file or Parquet/Arrow data: prompt/chosen/rejected pairs or prompt/completion/label",
        ),
        "val_fraction": Field(0.05, ge=0.0, lt=1.0),
        "test_fraction": Field(0.05, ge=0.0, lt=1.0),
    }

    max_len: int | None = Field(
        None, ge=2, description="cut prompt + completion to this many tokens (default: context)"
    )
