"""Model families built from :mod:`attnkit.nn`, each configured by a typed config object."""

from attnkit.models.config import EncoderConfig, StrictModel
from attnkit.models.encoders import ClassifierConfig, PredictorConfig, SequenceClassifier, TransformerPredictor

MODELS = {
    "predictor": (PredictorConfig, TransformerPredictor),
    "classifier": (ClassifierConfig, SequenceClassifier),
}


def build_model(name: str, config: dict | StrictModel):
    """Build a registered model from its name and config (a dict or the config object)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    config_cls, model_cls = MODELS[name]
    cfg = config if isinstance(config, config_cls) else config_cls.model_validate(config)
    return model_cls(cfg)


__all__ = [
    "MODELS",
    "ClassifierConfig",
    "EncoderConfig",
    "PredictorConfig",
    "SequenceClassifier",
    "StrictModel",
    "TransformerPredictor",
    "build_model",
]
