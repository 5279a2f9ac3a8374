"""Language modelling: train a GPT-style decoder on text, score it, generate from it (its LightningModule:
:mod:`attnkit.tasks.lm.module`)."""

from attnkit.tasks.lm.task import (
    LanguageModelTask,
    LMConfig,
    LMModelConfig,
    generate_from_run,
    generate_text,
    load_lm_base,
)

__all__ = ["LMConfig", "LMModelConfig", "LanguageModelTask", "generate_from_run", "generate_text", "load_lm_base"]
