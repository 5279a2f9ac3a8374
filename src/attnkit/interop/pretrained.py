"""Loading pretrained models from local folders: Hugging Face BERT, GPT-2, Llama, Mistral and Qwen2
folders, and attnkit model folders (written by ``attnkit import`` / ``attnkit export``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.data.collate import pad_sequences
from attnkit.data.pretrained_tokenizer import tokenizer_from_folder
from attnkit.data.tokenizers import Tokenizer, tokenizer_from_dict
from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop.bert import bert_config, bert_ignored, bert_rules, normalize_bert_names
from attnkit.interop.export import INFO_FILE, load_model, read_model_info, save_model
from attnkit.interop.gpt2 import gpt2_config, gpt2_ignored, gpt2_rules, normalize_gpt2_names
from attnkit.interop.llama import llama_config, llama_ignored, llama_rules, normalize_llama_names
from attnkit.interop.weights import convert_state_dict, load_weights, weight_names
from attnkit.models import BertClassifier, BertConfig, BertEncoder, LanguageModel, LanguageModelConfig

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Pretrained",
    "import_model",
    "load_encoder",
    "load_pretrained",
    "pretrained_encoder_config",
    "pretrained_tokenizer",
]

SUPPORTED_MODEL_TYPES = {
    "bert": "BERT encoders (BertModel, BertForMaskedLM, BertForPreTraining, ...; task heads are left out)",
    "gpt2": "GPT-2 decoders (GPT2LMHeadModel, GPT2Model)",
    "llama": "Llama decoders (LlamaForCausalLM, LlamaModel)",
    "mistral": "Mistral decoders (MistralForCausalLM, MistralModel)",
    "qwen2": "Qwen2 decoders (Qwen2ForCausalLM, Qwen2Model)",
}


@dataclass
class Pretrained:
    """A model loaded by :func:`load_pretrained` (in eval mode), with its tokenizer.

    ``name`` is the model's attnkit registry name: ``"bert"`` (:class:`BertEncoder`) or ``"lm"``
    (:class:`LanguageModel`) for Hugging Face folders, any registered model for attnkit folders.
    ``info`` is the folder's ``config.json`` (Hugging Face) or ``attnkit.json``.
    """

    model: nn.Module
    name: str
    tokenizer: Any | None
    source: Path
    info: dict[str, Any] = field(default_factory=dict)

    def _tok(self) -> Any:
        if self.tokenizer is None:
            raise ValueError(f"{self.source} has no tokenizer files (tokenizer.json, vocab.txt or vocab.json)")
        return self.tokenizer

    def encode(self, texts: Sequence[str], max_len: int | None = None) -> tuple[Tensor, Tensor]:
        """``(ids [N, T], mask [N, T] (True = real token))`` of ``texts``, padded with the pad id;
        each text truncated to ``max_len`` tokens (default: the model's ``max_len``)."""
        if isinstance(texts, str):
            raise TypeError("encode expects a list of texts, got a single str")
        tok = self._tok()
        max_len = max_len or getattr(self.model.config, "max_len", None)
        ids = [tok.encode(text, max_len) for text in texts]
        return pad_sequences(ids, tok.pad_id if tok.pad_id is not None else 0)

    def _encoder(self) -> BertEncoder:
        if isinstance(self.model, BertClassifier):
            return self.model.bert
        if not isinstance(self.model, BertEncoder):
            raise TypeError(f"{self.source} holds a {type(self.model).__name__}, not a BERT-family encoder")
        return self.model

    @torch.no_grad()
    def token_embeddings(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Last hidden states ``[N, T, D]`` of an encoder for ``texts``, and the mask ``[N, T]``."""
        ids, mask = self.encode(texts)
        return self._encoder()(ids, mask), mask

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> Tensor:
        """Sentence embeddings ``[N, D]`` of an encoder: mean of the last hidden states over real tokens."""
        ids, mask = self.encode(texts)
        return self._encoder().sentence_embedding(ids, mask)

    def generate(self, prompt: str, max_new_tokens: int = 20, **kwargs: Any) -> str:
        """The text a decoder writes after ``prompt`` (greedy by default: ``temperature=0``;
        other keyword arguments as :meth:`LanguageModel.generate`). An empty prompt starts from BOS."""
        if not isinstance(self.model, LanguageModel):
            raise TypeError(f"{self.source} holds a {type(self.model).__name__}, not a language model")
        tok = self._tok()
        ids = tok.encode(prompt) or [self.model.config.bos_id]
        kwargs.setdefault("temperature", 0.0)
        out = self.model.generate(torch.tensor([ids]), max_new_tokens, **kwargs)
        return tok.decode(out[0, len(ids) :].tolist())


def load_pretrained(path: str | Path) -> Pretrained:
    """Load the model and tokenizer in folder ``path``.

    A Hugging Face folder (``config.json``, ``model.safetensors``, shards listed by
    ``model.safetensors.index.json`` or ``pytorch_model.bin``, and ``tokenizer.json`` or
    ``vocab.txt`` / ``vocab.json`` + ``merges.txt``) of a supported ``model_type``
    (:data:`SUPPORTED_MODEL_TYPES`) is converted: BERT to :class:`BertEncoder`, GPT-2, Llama,
    Mistral and Qwen2 to :class:`LanguageModel`; every tensor is mapped by name, and a missing, unexpected or
    mis-shaped tensor is an error that names it. An attnkit model folder (``attnkit.json``) is
    loaded as it was saved. Weights are read without running pickled code (safetensors, or
    ``torch.load(weights_only=True)``), into float32 models.
    """
    folder = _folder(path)
    if (folder / INFO_FILE).is_file():
        info = read_model_info(folder)
        return Pretrained(load_model(folder), info["model"]["name"], _attnkit_tokenizer(folder, info), folder, info)
    hf = _hf_config(folder)
    tokenizer = _hf_tokenizer(folder)
    tensors, weights_file = load_weights(folder)
    source = str(weights_file)
    model: nn.Module
    if hf["model_type"] == "bert":
        tensors = normalize_bert_names(tensors)
        bert_cfg = bert_config(hf, pooler="pooler.dense.weight" in tensors, source=str(folder / "config.json"))
        model, name = BertEncoder(bert_cfg), "bert"
        state = convert_state_dict(tensors, bert_rules(bert_cfg), model, ignore=bert_ignored, source=source)
    elif hf["model_type"] == "gpt2":
        tensors = normalize_gpt2_names(tensors)
        eos = tokenizer.eos_id if tokenizer is not None else None
        lm_cfg = gpt2_config(hf, eos_id=eos, source=str(folder / "config.json"))
        model, name = LanguageModel(lm_cfg), "lm"
        ignore = _tied_head(tensors, lm_cfg, "wte.weight", gpt2_ignored, source)
        state = convert_state_dict(tensors, gpt2_rules(lm_cfg), model, ignore=ignore, source=source)
    else:
        tensors = normalize_llama_names(tensors)
        bos, eos = (tokenizer.bos_id, tokenizer.eos_id) if tokenizer is not None else (None, None)
        lm_cfg = llama_config(hf, bos_id=bos, eos_id=eos, source=str(folder / "config.json"))
        model, name = LanguageModel(lm_cfg), "lm"
        ignore = _tied_head(tensors, lm_cfg, "embed_tokens.weight", llama_ignored, source)
        state = convert_state_dict(tensors, llama_rules(lm_cfg), model, ignore=ignore, source=source)
    model.load_state_dict(state, strict=True)
    vocab_size = model.config.vocab_size
    if tokenizer is not None and tokenizer.vocab_size > vocab_size:
        raise ConfigError(
            f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {vocab_size}"
        )
    return Pretrained(model.eval(), name, tokenizer, folder, hf)


def _tied_head(
    tensors: dict[str, Tensor],
    config: LanguageModelConfig,
    embedding: str,
    ignored: Callable[[str], bool],
    source: str,
) -> Callable[[str], bool]:
    """The ``ignore`` of a decoder file: with tied weights a stored ``lm_head.weight`` must equal the
    token embedding ``embedding`` and is then left out."""
    if not (config.tie_weights and "lm_head.weight" in tensors):
        return ignored
    if not torch.equal(tensors["lm_head.weight"], tensors.get(embedding, torch.empty(0))):
        raise CheckpointError(
            f"{source}: config.json ties the output layer to the token embedding (tie_word_embeddings) "
            f"but lm_head.weight differs from {embedding}"
        )
    return lambda n: n == "lm_head.weight" or ignored(n)


def import_model(path: str | Path, out: str | Path) -> Pretrained:
    """Load the model folder ``path`` (see :func:`load_pretrained`) and write it to ``out`` as an
    attnkit model folder (:func:`save_model`), which :func:`load_pretrained` loads bit-exactly."""
    pretrained = load_pretrained(path)
    tokenizer = (
        pretrained.tokenizer
        if isinstance(pretrained.tokenizer, Tokenizer) and pretrained.tokenizer.spec.pretrained
        else None
    )
    info = pretrained.info if (pretrained.source / INFO_FILE).is_file() else {}
    save_model(
        pretrained.model,
        out,
        tokenizer=tokenizer,
        task=info.get("task"),
        artifacts=info.get("artifacts"),
        source=info.get("source") or f"{pretrained.source.resolve()} ({pretrained.info.get('model_type')})",
    )
    return pretrained


def pretrained_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a model folder (as :func:`load_pretrained` reads it), without the weights."""
    folder = _folder(path)
    if (folder / INFO_FILE).is_file():
        tokenizer = _attnkit_tokenizer(folder, read_model_info(folder))
    else:
        _hf_config(folder)
        tokenizer = _hf_tokenizer(folder)
    if tokenizer is None:
        raise FileNotFoundError(
            f"{folder} has no tokenizer: expected tokenizer.json, vocab.txt (WordPiece) or vocab.json + merges.txt"
        )
    return tokenizer


def pretrained_encoder_config(path: str | Path) -> BertConfig:
    """The :class:`BertConfig` of the encoder in a model folder, read without loading the weights."""
    folder = _folder(path)
    if (folder / INFO_FILE).is_file():
        model = read_model_info(folder)["model"]
        if model["name"] not in ("bert", "bert_classifier"):
            raise ConfigError(f"{folder} holds a {model['name']!r} model, not a BERT-family encoder")
        return BertConfig(**{k: v for k, v in model["config"].items() if k in BertConfig.model_fields})
    hf = _hf_config(folder)
    if hf["model_type"] != "bert":
        raise ConfigError(f"{folder} holds a {hf['model_type']!r} model, not a BERT-family encoder")
    names = normalize_bert_names(dict.fromkeys(weight_names(folder)))
    return bert_config(hf, pooler="pooler.dense.weight" in names, source=str(folder / "config.json"))


def load_encoder(path: str | Path) -> BertEncoder:
    """The BERT-family encoder of a model folder (the encoder of a saved classifier too)."""
    return load_pretrained(path)._encoder()


def _folder(path: str | Path) -> Path:
    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(f"no pretrained model at {folder}")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} is a file: pass the model's folder (with config.json and the weights, or attnkit.json)"
        )
    if not (folder / "config.json").is_file() and not (folder / INFO_FILE).is_file():
        raise FileNotFoundError(
            f"{folder} is not a model folder: expected config.json (a Hugging Face model) or {INFO_FILE} "
            "(written by attnkit import/export)"
        )
    return folder


def _hf_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        hf = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        archs = hf.get("architectures")
        archs = ", ".join(map(str, archs)) if isinstance(archs, list) and archs else "no architectures listed"
        supported = "; ".join(f"{k}: {v}" for k, v in SUPPORTED_MODEL_TYPES.items())
        raise ConfigError(f"{path}: model_type {model_type!r} ({archs}) is not supported. Supported: {supported}")
    return hf


def _hf_tokenizer(folder: Path) -> Tokenizer | None:
    try:
        return tokenizer_from_folder(folder)
    except FileNotFoundError:
        return None


def _attnkit_tokenizer(folder: Path, info: dict[str, Any]) -> Any:
    if (folder / "tokenizer.json").is_file():
        return tokenizer_from_folder(folder)
    stored = (info.get("artifacts") or {}).get("tokenizer")
    return tokenizer_from_dict(stored) if stored is not None else None
