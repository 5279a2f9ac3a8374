"""The translate task's config."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from attnkit.config import StrictModel
from attnkit.data.translate.config import PairsDataConfig
from attnkit.models.seq2seq import Seq2SeqArchitecture
from attnkit.tasks.base import TaskConfig

__all__ = ["DecodeConfig", "TranslateConfig"]


class DecodeConfig(StrictModel):
    """How the test split (and ``attnkit translate``) is decoded."""

    beam_size: int = Field(4, ge=1, description="1 = greedy decoding")
    length_penalty: float = Field(1.0, description="beam score = log P / length ** length_penalty")
    max_len: int | None = Field(
        None, gt=0, description="most tokens to generate, EOS included (default data.max_len+1)"
    )


class TranslateConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        "model": {"d_model": 64, "dim_feedforward": 256, "share_embeddings": True},
        "optim": {"optimizer": "adamw", "lr": 2e-3, "weight_decay": 0.01, "warmup": 200, "gradient_clip_val": 1.0},
        "trainer": {"max_epochs": 5, "batch_size": 64},
    }
    model: Seq2SeqArchitecture = Seq2SeqArchitecture()
    data: PairsDataConfig = PairsDataConfig()
    decode: DecodeConfig = DecodeConfig()
    label_smoothing: float = Field(0.1, ge=0.0, lt=1.0, description="cross-entropy label smoothing")

    @model_validator(mode="after")
    def _check_sharing(self) -> TranslateConfig:
        if self.model.share_embeddings and not self.data.shared_vocab:
            raise ValueError(
                "model.share_embeddings=true needs one vocabulary for both languages: set data.shared_vocab=true, "
                "or model.share_embeddings=false"
            )
        return self
