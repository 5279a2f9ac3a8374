"""Model families built from :mod:`attnkit.nn`, each configured by a typed config object."""

from attnkit.models.bert import BertArchitecture, BertClassifier, BertClassifierConfig, BertConfig, BertEncoder
from attnkit.models.config import EncoderConfig, OneOf, StrictModel
from attnkit.models.encoders import (
    ClassifierArchitecture,
    ClassifierConfig,
    PredictorArchitecture,
    PredictorConfig,
    SequenceClassifier,
    TransformerPredictor,
)
from attnkit.models.lm import LanguageModel, LanguageModelArchitecture, LanguageModelConfig
from attnkit.models.lora import LoraConfig, apply_lora, merge_lora
from attnkit.models.registry import MODELS, build_model, register_model
from attnkit.models.seq2seq import Seq2SeqArchitecture, Seq2SeqConfig, Seq2SeqTransformer

__all__ = [
    "MODELS",
    "BertArchitecture",
    "BertClassifier",
    "BertClassifierConfig",
    "BertConfig",
    "BertEncoder",
    "ClassifierArchitecture",
    "ClassifierConfig",
    "EncoderConfig",
    "LanguageModel",
    "LanguageModelArchitecture",
    "LanguageModelConfig",
    "LoraConfig",
    "OneOf",
    "PredictorArchitecture",
    "PredictorConfig",
    "Seq2SeqArchitecture",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "SequenceClassifier",
    "StrictModel",
    "TransformerPredictor",
    "apply_lora",
    "build_model",
    "merge_lora",
    "register_model",
]
