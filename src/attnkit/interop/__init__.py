"""Pretrained weights in and out of attnkit, from local folders only (nothing is downloaded).

- :func:`load_pretrained`: a Hugging Face folder of a registered checkpoint family
  (:data:`SUPPORTED_MODEL_TYPES`; encoders -> :class:`attnkit.models.BertEncoder`, decoders ->
  :class:`attnkit.models.LanguageModel`), or an attnkit model folder, with its tokenizer.
- :func:`save_model` / :func:`load_model`: attnkit model folders (safetensors + ``attnkit.json``),
  bit-exact.
- :func:`export_hf`: a language model (and tokenizer) as a Hugging Face folder of the family that
  writes its config, which ``transformers`` loads.

The families live in :mod:`attnkit.interop.family` (the registry) and ``attnkit/interop/families/``
(one file each).

``transformers`` is not needed: weights are read with ``safetensors`` (or ``torch.load`` with
``weights_only=True``) and tokenizers with ``tokenizers``. This package imports models and data
only (no tasks), so the classify task can start from pretrained weights (``model.init``).
"""

from attnkit.interop.export import load_model, plain_model, read_model_info, save_model
from attnkit.interop.family import families
from attnkit.interop.hf_export import export_hf, hf_tokenizer
from attnkit.interop.pretrained import (
    SUPPORTED_MODEL_TYPES,
    Pretrained,
    import_model,
    load_encoder,
    load_pretrained,
    pretrained_encoder_config,
    pretrained_tokenizer,
)

families()  # every checkpoint family registered, so that FAMILIES is complete on import

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Pretrained",
    "export_hf",
    "hf_tokenizer",
    "import_model",
    "load_encoder",
    "load_model",
    "load_pretrained",
    "plain_model",
    "pretrained_encoder_config",
    "pretrained_tokenizer",
    "read_model_info",
    "save_model",
]
