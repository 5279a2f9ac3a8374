"""Translation with the encoder–decoder Transformer (config: :mod:`attnkit.tasks.translate.config`, task and
translating text: :mod:`attnkit.tasks.translate.task`, LightningModule: :mod:`attnkit.tasks.translate.module`)."""

from attnkit.tasks.translate.config import DecodeConfig, TranslateConfig
from attnkit.tasks.translate.decoding import corpus_scores, decode_batch, one_line
from attnkit.tasks.translate.task import (
    TranslateTask,
    read_lines,
    translate_run,
    translate_scored,
    translate_texts,
)

__all__ = [
    "DecodeConfig",
    "TranslateConfig",
    "TranslateTask",
    "corpus_scores",
    "decode_batch",
    "one_line",
    "read_lines",
    "translate_run",
    "translate_scored",
    "translate_texts",
]
