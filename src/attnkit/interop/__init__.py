"""Pretrained weights in and out of attnkit, from local folders only (nothing is downloaded).

- :func:`load_pretrained`: a Hugging Face BERT (-> :class:`attnkit.models.BertEncoder`), GPT-2,
  Llama, Mistral or Qwen2 (-> :class:`attnkit.models.LanguageModel`) folder, or an attnkit model
  folder, with its tokenizer.
- :func:`save_model` / :func:`load_model`: attnkit model folders (safetensors + ``attnkit.json``),
  bit-exact.
- :func:`export_hf`: a language model (and tokenizer) as a Hugging Face ``llama`` / ``mistral`` /
  ``qwen2`` or ``gpt2`` folder that ``transformers`` loads.

``transformers`` is not needed: weights are read with ``safetensors`` (or ``torch.load`` with
``weights_only=True``) and tokenizers with ``tokenizers``. This package imports models and data
only (no tasks), so the classify task can start from pretrained weights (``model.init``).
"""

from attnkit.interop.export import load_model, plain_model, read_model_info, save_model
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
