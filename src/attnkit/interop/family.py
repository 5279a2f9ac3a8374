"""The checkpoint-family registry: what attnkit knows of each Hugging Face ``model_type``.

A family (:class:`Family`) is registered once, in its own file under ``attnkit/interop/families/``
(every module there is imported by :func:`families`, which ``attnkit.interop`` calls on import),
under the ``model_type`` its ``config.json`` names: how its config maps to attnkit's and back, its
weight-name rules (both ways: :class:`Rule`), which tensors of its files are not the model's, and,
for decoders that export, when a config is one of its own and what of a config it cannot express.
Loading (:func:`attnkit.interop.load_pretrained`), export (:func:`attnkit.interop.export_hf`), the
list of supported types and their messages are read from :data:`FAMILIES`; nothing else names a family.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from attnkit.errors import ConfigError
from attnkit.interop.weights import Rule
from attnkit.models import LanguageModelConfig
from attnkit.registry import Registry

__all__ = [
    "FAMILIES",
    "Family",
    "Reading",
    "SupportedTypes",
    "encoder_titles",
    "export_family",
    "families",
    "family_of",
]


@dataclass(frozen=True)
class Reading:
    """What a family's config mapping may read beside ``config.json``: the file's ``source`` (for
    messages), the tensor names of the weights (normalised), and the tokenizer's BOS / EOS ids
    (``None``: no tokenizer, or it has none)."""

    source: str
    names: frozenset[str]
    bos_id: int | None = None
    eos_id: int | None = None


@dataclass(frozen=True)
class Family:
    """One checkpoint family (one Hugging Face ``model_type``).

    Attributes:
        model_type: the ``model_type`` of its ``config.json``.
        description: the supported models, for the list of supported types
            (``"Llama decoders (LlamaForCausalLM, LlamaModel)"``).
        title: its name in messages (``"Llama"``, ``"GPT-2"``).
        model: the attnkit model registry name it loads as (``"lm"``, ``"bert"``).
        encoder: it loads as an encoder (``BertEncoder``), not a language model.
        build: the attnkit model of a config (``LanguageModel``).
        config: ``(config.json as a dict, Reading) -> attnkit config``; refuses what it cannot map.
        normalize: the file's tensor names without the task model's prefix (``model.``, ``bert.``).
        rules: the attnkit config -> its :class:`Rule` list (file names as ``normalize`` leaves them).
        ignored: tensors of the file that are not the model's (buffers, task heads).
        embedding: the token embedding's name in the file; a tied ``lm_head.weight`` must equal it.
        prefix: the prefix of every tensor but ``lm_head.weight`` in the exported file (``"model."``).
        hf_config: the attnkit config -> ``config.json`` (dict); ``None``: the family does not export.
        claims: whether an attnkit config is meant as one of this family's (export picks, among the
            families that claim a config, the first that can express it).
        problems: what of an attnkit config the family's checkpoints cannot express (``[]``: it exports).
        group: the families' name in export messages (``"a Llama-family (llama/mistral/qwen2)"``).
        needs: what its configs need, for export messages (``"GPT-2 models positional='learned', ..."``).
    """

    model_type: str
    description: str
    title: str
    model: str
    encoder: bool
    build: Callable[[Any], nn.Module]
    config: Callable[[dict[str, Any], Reading], Any]
    normalize: Callable[[dict[str, Any]], dict[str, Any]]
    rules: Callable[[Any], list[Rule]]
    ignored: Callable[[str], bool]
    embedding: str | None = None
    prefix: str = ""
    hf_config: Callable[[LanguageModelConfig], dict[str, Any]] | None = None
    claims: Callable[[LanguageModelConfig], bool] = lambda config: False
    problems: Callable[[LanguageModelConfig], list[str]] = lambda config: []
    group: str = ""
    needs: str = ""

    def register(self) -> Family:
        """Add this family to :data:`FAMILIES` under its ``model_type``; returns it."""
        return FAMILIES.add(self.model_type, self)


FAMILIES: Registry[Family] = Registry("checkpoint family")
_LOADED: list[bool] = []


def families() -> Registry[Family]:
    """:data:`FAMILIES`, with every module of ``attnkit.interop.families`` imported (so registered)."""
    if not _LOADED:
        package = importlib.import_module("attnkit.interop.families")
        for info in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
            importlib.import_module(info.name)
        _LOADED.append(True)
    return FAMILIES


class SupportedTypes(Mapping[str, str]):
    """The supported ``model_type`` s and what each loads (a live view of :data:`FAMILIES`)."""

    def __getitem__(self, model_type: str) -> str:
        if model_type not in families():
            raise KeyError(model_type)
        return FAMILIES.get(model_type).description

    def __iter__(self) -> Iterator[str]:
        return iter(families())

    def __len__(self) -> int:
        return len(families())

    def __repr__(self) -> str:
        return repr(dict(self))


def family_of(hf: dict[str, Any], path: str) -> Family:
    """The family of a ``config.json`` (dict, read from ``path``); a :class:`ConfigError` listing the
    supported types otherwise."""
    model_type = hf.get("model_type")
    if isinstance(model_type, str) and model_type in families():
        return FAMILIES.get(model_type)
    archs = hf.get("architectures")
    archs = ", ".join(map(str, archs)) if isinstance(archs, list) and archs else "no architectures listed"
    supported = "; ".join(f"{f.model_type}: {f.description}" for f in sorted(FAMILIES.values(), key=_type))
    raise ConfigError(f"{path}: model_type {model_type!r} ({archs}) is not supported. Supported: {supported}")


def _type(family: Family) -> str:
    return family.model_type


def encoder_titles() -> str:
    """The families that load as encoders, for messages (``"BERT-family"``)."""
    return "/".join(f.title for f in families().values() if f.encoder) + "-family"


def export_family(config: LanguageModelConfig, model_type: str | None = None) -> Family:
    """The family a language model's config is written as: ``model_type`` where given, else the first
    of the families that claim it (all that export when none does) that can express it; otherwise a
    :class:`ConfigError` naming what the nearest of them cannot express and what each family needs."""
    writers = [f for f in families().values() if f.hf_config is not None]
    if not config.mlp:
        raise ConfigError(
            "this model has attention-only blocks (mlp=false), which no Hugging Face decoder family can express "
            "(each has an MLP in every block); keep it as an attnkit model folder (attnkit export --format attnkit)"
        )
    if model_type is not None:
        chosen = [f for f in writers if f.model_type == model_type]
        if not chosen:
            raise ConfigError(
                f"cannot write model_type {model_type!r}: the families that export are "
                f"{', '.join(sorted(f.model_type for f in writers))}"
            )
        candidates = chosen
    else:
        candidates = [f for f in writers if f.claims(config)] or writers
    found = [(f, f.problems(config)) for f in candidates]
    for family, problems in found:
        if not problems:
            return family
    nearest, problems = min(found, key=lambda pair: len(pair[1]))
    needs = "; ".join(dict.fromkeys(f.needs for f in writers if f.needs))
    raise ConfigError(
        f"this model cannot be written as {nearest.group or 'a ' + nearest.title} Hugging Face checkpoint: "
        + "; ".join(problems)
        + f". {needs}"
    )
