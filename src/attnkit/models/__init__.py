"""Model families built from :mod:`attnkit.nn`, each configured by a typed config object."""

from collections.abc import Callable
from typing import Any

from torch import nn

from attnkit.models.bert import BertClassifier, BertClassifierConfig, BertConfig, BertEncoder
from attnkit.models.config import EncoderConfig, StrictModel
from attnkit.models.encoders import ClassifierConfig, PredictorConfig, SequenceClassifier, TransformerPredictor
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.lora import LoraConfig, apply_lora, merge_lora
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

MODELS: dict[str, tuple[type[StrictModel], Callable[[Any], nn.Module]]] = {
    "predictor": (PredictorConfig, TransformerPredictor),
    "classifier": (ClassifierConfig, SequenceClassifier),
    "lm": (LanguageModelConfig, LanguageModel),
    "bert": (BertConfig, BertEncoder),
    "bert_classifier": (BertClassifierConfig, BertClassifier),
    "seq2seq": (Seq2SeqConfig, Seq2SeqTransformer),
}


def build_model(name: str, config: dict[str, Any] | StrictModel) -> nn.Module:
    """Build a registered model from its name and config (a dict or the config object)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    config_cls, model_cls = MODELS[name]
    cfg = config if isinstance(config, config_cls) else config_cls.model_validate(config)
    return model_cls(cfg)


__all__ = [
    "MODELS",
    "BertClassifier",
    "BertClassifierConfig",
    "BertConfig",
    "BertEncoder",
    "ClassifierConfig",
    "EncoderConfig",
    "LanguageModel",
    "LanguageModelConfig",
    "LoraConfig",
    "PredictorConfig",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "SequenceClassifier",
    "StrictModel",
    "TransformerPredictor",
    "apply_lora",
    "build_model",
    "merge_lora",
]
