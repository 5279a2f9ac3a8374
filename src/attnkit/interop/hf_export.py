"""Writing an attnkit :class:`LanguageModel` as a Hugging Face folder that ``transformers`` loads.

:func:`export_hf` writes ``config.json``, ``model.safetensors`` and, with a tokenizer,
``tokenizer.json`` + ``tokenizer_config.json``, as the checkpoint family the model's config belongs to
(:func:`attnkit.interop.family.export_family`: among the registered families that claim the config, the
first that can express it). ``transformers.AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load the folder; :func:`attnkit.interop.load_pretrained` loads it
back. A config no family can express is an error that lists what cannot be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import processors
from torch import nn

from attnkit.errors import ConfigError
from attnkit.interop.family import export_family, families
from attnkit.interop.weights import export_state_dict
from attnkit.models import LanguageModel
from attnkit.text.tokenizer_kinds import kind_names
from attnkit.text.tokenizers import BOS, BOS_ID, EOS, PAD, UNK, Tokenizer

__all__ = ["export_hf", "hf_tokenizer"]


def export_hf(
    model: nn.Module, folder: str | Path, tokenizer: Any | None = None, *, model_type: str | None = None
) -> str:
    """Write ``model`` (a :class:`LanguageModel`) and ``tokenizer`` (an attnkit
    :class:`~attnkit.text.tokenizers.Tokenizer` of kind pretrained, char, word or bpe; optional) to
    ``folder`` as a Hugging Face checkpoint; returns the ``model_type`` written: ``model_type`` (a
    registered family that exports) where given, else the family of the config
    (:func:`~attnkit.interop.family.export_family`). Weights are float32; tied weights are stored once."""
    if not isinstance(model, LanguageModel):
        decoders = ", ".join(f.title for f in families().values() if f.hf_config is not None)
        raise ConfigError(
            f"only language models (lm runs, imported {decoders} models) export as Hugging Face "
            f"checkpoints; this is a {type(model).__name__}"
        )
    config = model.config
    family = export_family(config, model_type)
    assert family.hf_config is not None  # (export_family returns a family that exports)
    hf, rules = family.hf_config(config), family.rules(config)
    tensors = export_state_dict({k: v.float() for k, v in model.state_dict().items()}, rules)
    prefix = family.prefix
    tensors = {(name if name == "lm_head.weight" else prefix + name): t for name, t in tensors.items()}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    if tokenizer is not None:
        hf_tokenizer(tokenizer).save(folder)
        options_file = folder / "tokenizer_config.json"
        options = json.loads(options_file.read_text())
        options |= {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.max_len}
        options_file.write_text(json.dumps(options, indent=2, sort_keys=True) + "\n")
    return family.model_type


def hf_tokenizer(tokenizer: Any) -> Tokenizer:
    """``tokenizer`` as a ``"pretrained"`` :class:`~attnkit.text.tokenizers.Tokenizer` whose
    ``tokenizer.json`` Hugging Face loads and runs as attnkit does.

    A pretrained model's tokenizer is written as it is. A generation tokenizer (``char``, ``word``,
    ``bpe``: already a ``tokenizers`` pipeline) gets a post-processor adding ``<bos>`` before every
    text, as attnkit's lm task does; its ids are the same. A classification (``text``) tokenizer is
    not for language models and is an error.
    """
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"expected an attnkit Tokenizer, got {type(tokenizer).__name__}")
    if tokenizer.spec.pretrained:
        return tokenizer
    if not tokenizer.spec.generation:
        kinds = [*kind_names(generation=True), *kind_names(pretrained=True)]
        raise ConfigError(
            f"a {tokenizer.kind!r} tokenizer cannot be written as a language model's Hugging Face tokenizer.json "
            f"(only {', '.join(kinds[:-1])} and {kinds[-1]} ones)"
        )
    spec = json.loads(tokenizer.backend.to_str())
    for added in spec.get("added_tokens", []):
        if added["content"] == UNK:
            # An ordinary token to Hugging Face: decoding shows an unknown piece as <unk>, as attnkit's
            # decode does (skip_special_tokens=True would drop it and change the text).
            added["special"] = False
    hf = HFTokenizer.from_str(json.dumps(spec))
    hf.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, BOS_ID)])
    return Tokenizer(hf, "pretrained", {"pad": PAD, "bos": BOS, "eos": EOS, "unk": UNK})
