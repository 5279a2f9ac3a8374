"""BERT (Hugging Face ``model_type: bert``) -> :class:`attnkit.models.BertEncoder`.

Hugging Face's ``BertModel`` is a post-norm encoder: word + token-type + position embeddings,
LayerNorm (eps ``layer_norm_eps``, 1e-12), then per layer separate query/key/value projections,
an output projection and LayerNorm, a GELU feed-forward and LayerNorm, and a tanh pooler. In
attnkit the three projections are one fused ``in_proj`` (q, k, v stacked in that order).
"""

from __future__ import annotations

from typing import Any, TypeVar

from attnkit.errors import ConfigError
from attnkit.interop.family import Family, Reading
from attnkit.interop.hfconfig import reading_config
from attnkit.interop.weights import Rule
from attnkit.models.bert import BertConfig, BertEncoder

__all__ = ["HEAD_PREFIXES", "bert_config", "bert_ignored", "bert_rules", "normalize_bert_names"]

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# Task heads of BertForPreTraining / BertForMaskedLM / BertFor...Classification / ...QuestionAnswering:
# not part of the encoder, left out.
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")


def bert_config(hf: dict[str, Any], *, pooler: bool, source: str) -> BertConfig:
    """The attnkit config of a Hugging Face BERT ``config.json`` (dict)."""
    unsupported = []
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        unsupported.append("is_decoder/add_cross_attention (a BERT decoder)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type={hf['position_embedding_type']!r} (only 'absolute')")
    act = hf.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        unsupported.append(f"hidden_act={act!r} (supported: {', '.join(ACTIVATIONS)})")
    if unsupported:
        raise ConfigError(f"{source}: this BERT variant is not supported: {'; '.join(unsupported)}")
    with reading_config(source, "BERT"):
        return BertConfig(
            vocab_size=hf["vocab_size"],
            d_model=hf["hidden_size"],
            num_heads=hf["num_attention_heads"],
            num_layers=hf["num_hidden_layers"],
            dim_feedforward=hf["intermediate_size"],
            dropout=hf.get("hidden_dropout_prob", 0.1),
            activation=ACTIVATIONS[act],
            max_len=hf["max_position_embeddings"],
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            pad_id=hf.get("pad_token_id", 0),
            pooler=pooler,
        )


V = TypeVar("V")


def normalize_bert_names(tensors: dict[str, V]) -> dict[str, V]:
    """Without the ``bert.`` prefix of task models; old TensorFlow-era names ``LayerNorm.gamma/beta``
    read as ``LayerNorm.weight/bias`` (the values, tensors or anything else, are kept)."""
    out = {}
    for name, tensor in tensors.items():
        name = name.removeprefix("bert.")
        if name.endswith("LayerNorm.gamma"):
            name = name.removesuffix("gamma") + "weight"
        elif name.endswith("LayerNorm.beta"):
            name = name.removesuffix("beta") + "bias"
        out[name] = tensor
    return out


def bert_ignored(name: str) -> bool:
    """Tensors of a BERT file that are not the encoder's: task heads and the position-id buffer."""
    return name.startswith(HEAD_PREFIXES) or name in ("embeddings.position_ids", "embeddings.token_type_ids")


def bert_rules(config: BertConfig, *, prefix: str = "") -> list[Rule]:
    """How each tensor of :class:`BertEncoder` (names under ``prefix``) is made from a BERT file."""

    def pair(target: str, source: str) -> list[Rule]:
        return [Rule(f"{prefix}{target}.{p}", (f"{source}.{p}",)) for p in ("weight", "bias")]

    rules = [
        Rule(f"{prefix}token_embedding.weight", ("embeddings.word_embeddings.weight",)),
        Rule(f"{prefix}positional.embedding.weight", ("embeddings.position_embeddings.weight",)),
        *pair("norm", "embeddings.LayerNorm"),
    ]
    if config.type_vocab_size:
        rules.append(Rule(f"{prefix}token_type_embedding.weight", ("embeddings.token_type_embeddings.weight",)))
    for i in range(config.num_layers):
        src, dst = f"encoder.layer.{i}", f"encoder.layers.{i}"
        for p in ("weight", "bias"):
            qkv = tuple(f"{src}.attention.self.{m}.{p}" for m in ("query", "key", "value"))
            rules.append(Rule(f"{prefix}{dst}.self_attn.in_proj.{p}", qkv))
        rules += pair(f"{dst}.self_attn.out_proj", f"{src}.attention.output.dense")
        rules += pair(f"{dst}.norm1", f"{src}.attention.output.LayerNorm")
        rules += pair(f"{dst}.ff.linear1", f"{src}.intermediate.dense")
        rules += pair(f"{dst}.ff.linear2", f"{src}.output.dense")
        rules += pair(f"{dst}.norm2", f"{src}.output.LayerNorm")
    if config.pooler:
        rules += pair("pooler", "pooler.dense")
    return rules


def _config(hf: dict[str, Any], reading: Reading) -> BertConfig:
    return bert_config(hf, pooler="pooler.dense.weight" in reading.names, source=reading.source)


Family(
    model_type="bert",
    description="BERT encoders (BertModel, BertForMaskedLM, BertForPreTraining, ...; task heads are left out)",
    title="BERT",
    model="bert",
    encoder=True,
    build=BertEncoder,
    config=_config,
    normalize=normalize_bert_names,
    rules=bert_rules,
    ignored=bert_ignored,
).register()
