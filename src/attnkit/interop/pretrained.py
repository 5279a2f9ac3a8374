"""Loading pretrained models from local folders: Hugging Face folders of the registered checkpoint
families (:data:`attnkit.interop.family.FAMILIES`), and attnkit model folders (written by
``attnkit import`` / ``attnkit export``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.data.collate import pad_sequences
from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop.export import INFO_FILE, MODEL_FILE, check_files, load_model, read_model_info, save_model
from attnkit.interop.family import Family, Reading, SupportedTypes, encoder_titles, family_of
from attnkit.interop.weights import convert_state_dict, load_weights, weight_names
from attnkit.models import BertClassifier, BertConfig, BertEncoder, LanguageModel
from attnkit.text.chat import ChatTemplate, encode_chat, eos_token_ids, read_generation_config
from attnkit.text.chat import stop_ids as chat_stop_ids
from attnkit.text.chat import stop_strings as chat_stop_strings
from attnkit.text.framing import prompt_ids
from attnkit.text.generate import generate_texts, sampling_params
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.tokenizers import Tokenizer, tokenizer_from_dict

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Pretrained",
    "import_model",
    "load_encoder",
    "load_pretrained",
    "pretrained_encoder_config",
    "pretrained_tokenizer",
]

SUPPORTED_MODEL_TYPES = SupportedTypes()
"""``{model_type: what it loads}`` of every registered checkpoint family (a live view)."""


@dataclass
class Pretrained:
    """A model loaded by :func:`load_pretrained` (in eval mode), with its tokenizer.

    ``name`` is the model's attnkit registry name: its family's (``"bert"``: :class:`BertEncoder`, ``"lm"``:
    :class:`LanguageModel`) for Hugging Face folders, any registered model for attnkit folders.
    ``info`` is the folder's ``config.json`` (Hugging Face) or ``attnkit.json``. ``chat_template``: the
    folder's chat template (``None``: it has none, and :meth:`chat` uses :meth:`ChatTemplate.default`);
    ``generation_config``: its ``generation_config.json`` (``{}`` when absent).

    A decoder's text interface: :meth:`encode_prompt` / :meth:`generate` continue a text,
    :meth:`encode_chat` / :meth:`chat` answer a conversation, and generation stops at :attr:`stop_ids`
    (the EOS and the template's end-of-turn tokens) and :attr:`stop_strings`.
    """

    model: nn.Module
    name: str
    tokenizer: Any | None
    source: Path
    info: dict[str, Any] = field(default_factory=dict)
    chat_template: ChatTemplate | None = None
    generation_config: dict[str, Any] = field(default_factory=dict)

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
            raise TypeError(f"{self.source} holds a {type(self.model).__name__}, not a {encoder_titles()} encoder")
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

    # ------------------------------------------------------------------ a decoder's text interface
    def _lm(self) -> LanguageModel:
        if not isinstance(self.model, LanguageModel):
            raise TypeError(f"{self.source} holds a {type(self.model).__name__}, not a language model")
        return self.model

    def _text_tokenizer(self) -> Tokenizer:
        tok = self._tok()
        if not isinstance(tok, Tokenizer):
            raise TypeError(f"{self.source}: its tokenizer is a {type(tok).__name__}, not an attnkit Tokenizer")
        return tok

    @property
    def context(self) -> int:
        """The decoder's context: how many tokens (prompt and generated) it attends to."""
        return self._lm().config.max_len

    @property
    def template(self) -> ChatTemplate:
        """The chat template :meth:`chat` uses: the folder's, else :meth:`ChatTemplate.default`."""
        if self.chat_template is not None:
            return self.chat_template
        return ChatTemplate.default()

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end a reply: the EOS of the model, its tokenizer and ``generation_config.json``, and the
        chat template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``...) where it is one token."""
        ids = chat_stop_ids(self._text_tokenizer(), self.template, self.generation_config)
        return sorted({*ids, self._lm().config.eos_id})

    @property
    def eos_ids(self) -> list[int]:
        """Ids that end a text: the model's EOS and those of ``generation_config.json`` (what
        :meth:`generate` stops at, as transformers' ``generate`` does)."""
        return sorted({*eos_token_ids(self.generation_config), self._lm().config.eos_id})

    @property
    def stop_strings(self) -> list[str]:
        """Text that ends a reply: the chat template's end-of-turn where it is not a single token."""
        return chat_stop_strings(self._text_tokenizer(), self.template)

    def encode_prompt(self, text: str) -> list[int]:
        """The ids the decoder continues for ``text`` (:func:`attnkit.text.framing.prompt_ids`: its BOS where
        the model's documents start with one; never empty)."""
        return prompt_ids(self._text_tokenizer(), text)

    def encode_chat(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        """The ids of a conversation (``[{"role": "user", "content": "Hi"}, ...]``) with :attr:`template`
        applied, as transformers' ``apply_chat_template(..., add_generation_prompt=True)`` gives them."""
        return encode_chat(self._text_tokenizer(), self.template, messages, add_generation_prompt=add_generation_prompt)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens left out)."""
        return str(self._tok().decode(list(ids)))

    def generate(self, prompt: str, max_new_tokens: int = 20, **kwargs: Any) -> str:
        """The text a decoder writes after ``prompt`` (greedy by default: ``temperature=0``). The keyword
        arguments are the sampling options: a :class:`~attnkit.models.generation.SamplingParams` ``params``
        and/or its fields by name (``top_p=0.9``, ``seed=1``, ``stop=["."]``...), and ``generator``,
        ``stop_ids``, ``stop_strings`` (more stops), ``num_beams``, ``length_penalty`` (beam search). An empty
        prompt starts from BOS."""
        return self._continue(self.encode_prompt(prompt), max_new_tokens, kwargs, self.eos_ids, [])

    def chat(
        self,
        messages: Sequence[dict[str, Any]],
        max_new_tokens: int = 256,
        *,
        on_text: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> str:
        """The decoder's reply to ``messages`` (see :meth:`encode_chat`): generated until an end-of-turn
        (:attr:`stop_ids`, :attr:`stop_strings`) or ``max_new_tokens``; greedy by default
        (``temperature=0``; the keyword arguments are the sampling options, as :meth:`generate` takes them,
        e.g. ``top_p``, ``seed``, ``params``, ``generator``). ``on_text`` receives the reply piece by piece as
        it is generated. A conversation
        that does not fit the context with room for one new token is a :class:`ValueError`."""
        ids = self.encode_chat(messages)
        if len(ids) >= self.context:
            raise ValueError(
                f"the conversation is {len(ids)} tokens; the model's context is {self.context}: drop earlier turns"
            )
        max_new_tokens = min(max_new_tokens, self.context - len(ids))
        return self._continue(ids, max_new_tokens, kwargs, self.stop_ids, self.stop_strings, on_text)

    def _continue(
        self,
        ids: list[int],
        max_new_tokens: int,
        options: dict[str, Any],
        ends: list[int],
        texts: list[str],
        on_text: Callable[[str], None] | None = None,
    ) -> str:
        """The text generated after ``ids`` (:func:`attnkit.text.generate.generate_texts`), cut at the first of
        the stop ids ``ends`` or stop strings ``texts`` (with those given in ``options``).

        ``options``: the sampling options, one :class:`~attnkit.models.generation.SamplingParams` (``params``)
        and/or its fields by name over it (greedy by default: ``temperature=0``); ``stop_strings`` and
        ``stop_ids`` (more stops); ``generator``; ``num_beams`` and ``length_penalty`` (beam search)."""
        options = dict(options)
        generator = options.pop("generator", None)
        beams = {k: options.pop(k) for k in ("num_beams", "length_penalty") if k in options}
        stop_ids = [*ends, *(options.pop("stop_ids", None) or [])]
        extra = list(options.pop("stop_strings", None) or [])
        params = sampling_params(options.pop("params", None), options, temperature=0.0)
        stops = tuple(dict.fromkeys([*texts, *params.stop, *extra]))
        params = params.replace(max_tokens=max_new_tokens, stop=stops)
        stream = None if on_text is None else (lambda _row, piece, out=on_text: out(piece))
        (text,) = generate_texts(
            self._lm(), self._text_tokenizer(), [ids], params, generator=generator, stop_ids=stop_ids,
            on_text=stream, **beams,
        )  # fmt: skip
        return text


def load_pretrained(path: str | Path) -> Pretrained:
    """Load the model and tokenizer in folder ``path``.

    A Hugging Face folder (``config.json``, ``model.safetensors``, shards listed by
    ``model.safetensors.index.json`` or ``pytorch_model.bin``, and ``tokenizer.json`` or
    ``vocab.json`` + ``merges.txt``) of a supported ``model_type`` (:data:`SUPPORTED_MODEL_TYPES`, the
    registered families) is converted by its family: encoders to :class:`BertEncoder`, decoders to
    :class:`LanguageModel`; every tensor is mapped by name, and a missing, unexpected or
    mis-shaped tensor is an error that names it. An attnkit model folder (``attnkit.json``) is
    loaded as it was saved. Weights are read without running pickled code (safetensors, or
    ``torch.load(weights_only=True)``), into float32 models.
    """
    folder = _folder(path)
    if (folder / INFO_FILE).is_file():
        info = read_model_info(folder)
        check_files(folder, info, [name for name in info.get("files") or {} if name != MODEL_FILE])
        tokenizer = _attnkit_tokenizer(folder, info)
        return Pretrained(
            load_model(folder), info["model"]["name"], tokenizer, folder, info, *_chat_files(folder, tokenizer)
        )
    hf, family = _hf_config(folder)
    tokenizer = _hf_tokenizer(folder)
    tensors, weights_file = load_weights(folder)
    source = str(weights_file)
    tensors = family.normalize(tensors)
    bos, eos = (tokenizer.bos_id, tokenizer.eos_id) if tokenizer is not None else (None, None)
    config = family.config(hf, Reading(str(folder / "config.json"), frozenset(tensors), bos, eos))
    model = family.build(config)
    ignore = _tied_head(tensors, config, family, source)
    state = convert_state_dict(tensors, family.rules(config), model, ignore=ignore, source=source)
    name = family.model
    model.load_state_dict(state, strict=True)
    vocab_size = config.vocab_size
    if tokenizer is not None and tokenizer.vocab_size > vocab_size:
        raise ConfigError(
            f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {vocab_size}"
        )
    return Pretrained(model.eval(), name, tokenizer, folder, hf, *_chat_files(folder, tokenizer))


def _chat_files(folder: Path, tokenizer: Any) -> tuple[ChatTemplate | None, dict[str, Any]]:
    """The folder's chat template (for a text tokenizer) and ``generation_config.json``."""
    template = ChatTemplate.from_folder(folder) if isinstance(tokenizer, Tokenizer) else None
    return template, read_generation_config(folder)


def _tied_head(tensors: dict[str, Tensor], config: Any, family: Family, source: str) -> Callable[[str], bool]:
    """The ``ignore`` of a family's file: with tied weights (a decoder's ``tie_weights``) a stored
    ``lm_head.weight`` must equal the family's token embedding and is then left out."""
    ignored, embedding = family.ignored, family.embedding
    if embedding is None or not (getattr(config, "tie_weights", False) and "lm_head.weight" in tensors):
        return ignored
    if not torch.equal(tensors["lm_head.weight"], tensors.get(embedding, torch.empty(0))):
        raise CheckpointError(
            f"{source}: config.json ties the output layer to the token embedding (tie_word_embeddings) "
            f"but lm_head.weight differs from {embedding}"
        )
    return lambda n: n == "lm_head.weight" or ignored(n)


def import_model(path: str | Path, out: str | Path) -> Pretrained:
    """Load the model folder ``path`` (see :func:`load_pretrained`) and write it to ``out`` as an
    attnkit model folder (:func:`save_model`), which :func:`load_pretrained` loads bit-exactly, with
    its chat template (``chat_template.jinja``) and ``generation_config.json``."""
    pretrained = load_pretrained(path)
    tokenizer = (
        pretrained.tokenizer
        if isinstance(pretrained.tokenizer, Tokenizer) and pretrained.tokenizer.spec.pretrained
        else None
    )
    info = pretrained.info if (pretrained.source / INFO_FILE).is_file() else {}
    extra: dict[str, str] = {}
    if tokenizer is not None and pretrained.chat_template is not None:  # what chat and serve read
        extra["chat_template.jinja"] = pretrained.chat_template.source
    if pretrained.generation_config:
        extra["generation_config.json"] = json.dumps(pretrained.generation_config, indent=2) + "\n"
    save_model(
        pretrained.model,
        out,
        tokenizer=tokenizer,
        task=info.get("task"),
        artifacts=info.get("artifacts"),
        source=info.get("source") or f"{pretrained.source.resolve()} ({pretrained.info.get('model_type')})",
        extra_files=extra,
    )
    return pretrained


def pretrained_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a model folder (as :func:`load_pretrained` reads it), without the weights."""
    folder = _folder(path)
    if (folder / INFO_FILE).is_file():
        info = read_model_info(folder)
        check_files(folder, info, ["tokenizer.json", "tokenizer_config.json"])
        tokenizer = _attnkit_tokenizer(folder, info)
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
            raise ConfigError(f"{folder} holds a {model['name']!r} model, not a {encoder_titles()} encoder")
        return BertConfig(**{k: v for k, v in model["config"].items() if k in BertConfig.model_fields})
    hf, family = _hf_config(folder)
    if not family.encoder:
        raise ConfigError(f"{folder} holds a {hf['model_type']!r} model, not a {encoder_titles()} encoder")
    names = family.normalize(dict.fromkeys(weight_names(folder)))
    config = family.config(hf, Reading(str(folder / "config.json"), frozenset(names)))
    assert isinstance(config, BertConfig)
    return config


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


def _hf_config(folder: Path) -> tuple[dict[str, Any], Family]:
    """The folder's ``config.json`` and its family."""
    path = folder / "config.json"
    try:
        hf = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return hf, family_of(hf, str(path))


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
