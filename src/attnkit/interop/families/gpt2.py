"""GPT-2 (Hugging Face ``model_type: gpt2``) -> :class:`attnkit.models.LanguageModel`.

GPT-2 is a pre-norm decoder: token + learned position embeddings, per layer ``ln_1`` -> causal
self-attention (one fused ``c_attn`` projection, q, k, v in that order) -> ``ln_2`` -> MLP with the
tanh GELU (``gelu_new``), a final ``ln_f`` and an output layer tied to the token embedding. Its
``Conv1D`` layers store weights as ``[in, out]``, the transpose of ``nn.Linear``'s.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.interop.family import Family
from attnkit.interop.hfconfig import reading_config
from attnkit.interop.weights import Rule
from attnkit.models.lm import LanguageModel, LanguageModelConfig

__all__ = ["gpt2_config", "gpt2_ignored", "gpt2_problems", "gpt2_rules", "hf_gpt2_config", "normalize_gpt2_names"]

# gelu_new, gelu_fast and gelu_pytorch_tanh are the same tanh approximation (to float rounding).
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
HEAD_PREFIXES = ("score.", "multiple_choice_head.", "qa_outputs.", "classifier.")


def gpt2_config(hf: dict[str, Any], *, eos_id: int | None, source: str) -> LanguageModelConfig:
    """The attnkit config of a Hugging Face GPT-2 ``config.json`` (dict).

    GPT-2 has one special token, ``<|endoftext|>``, which begins and ends texts: it becomes
    ``bos_id``, ``eos_id`` and ``pad_id``. ``eos_id`` (from the tokenizer) wins over the config's
    ``eos_token_id``; without either in the vocabulary the last id is used (as in GPT-2's own).
    """
    unsupported = []
    if hf.get("add_cross_attention"):
        unsupported.append("add_cross_attention (cross-attention layers)")
    if hf.get("scale_attn_by_inverse_layer_idx"):
        unsupported.append("scale_attn_by_inverse_layer_idx")
    if not hf.get("scale_attn_weights", True):
        unsupported.append("scale_attn_weights=false")
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        unsupported.append(f"activation_function={act!r} (supported: {', '.join(ACTIVATIONS)})")
    if unsupported:
        raise ConfigError(f"{source}: this GPT-2 variant is not supported: {'; '.join(unsupported)}")
    with reading_config(source, "GPT-2"):
        vocab_size, d_model = hf["vocab_size"], hf["n_embd"]
        if eos_id is None or not 0 <= eos_id < vocab_size:
            eos_id = hf.get("eos_token_id")
        if not isinstance(eos_id, int) or not 0 <= eos_id < vocab_size:
            eos_id = vocab_size - 1
        return LanguageModelConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            num_heads=hf["n_head"],
            num_layers=hf["n_layer"],
            dim_feedforward=hf.get("n_inner") or 4 * d_model,
            dropout=hf.get("resid_pdrop", 0.1),
            activation=ACTIVATIONS[act],
            norm_first=True,
            positional="learned",
            max_len=hf["n_positions"],
            tie_weights=hf.get("tie_word_embeddings", True),
            bias=True,
            layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            pad_id=eos_id,
            bos_id=eos_id,
            eos_id=eos_id,
        )


def normalize_gpt2_names(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Without the ``transformer.`` prefix of ``GPT2LMHeadModel`` and the other task models."""
    return {name.removeprefix("transformer."): tensor for name, tensor in tensors.items()}


def gpt2_ignored(name: str) -> bool:
    """Tensors of a GPT-2 file that are not the language model's: the causal-mask buffers of old
    checkpoints (``attn.bias``, ``attn.masked_bias``) and task heads."""
    return name.endswith((".attn.bias", ".attn.masked_bias")) or name.startswith(HEAD_PREFIXES)


def gpt2_rules(config: LanguageModelConfig) -> list[Rule]:
    """How each tensor of :class:`LanguageModel` is made from a GPT-2 file.

    With tied weights the output layer is the token embedding (a separate ``lm_head.weight`` in
    the file must then equal it: the caller checks); untied, it comes from ``lm_head.weight``.
    """

    def pair(target: str, source: str, transpose: bool = False) -> list[Rule]:
        return [Rule(f"{target}.weight", (f"{source}.weight",), transpose), Rule(f"{target}.bias", (f"{source}.bias",))]

    rules = [
        Rule("token_embedding.weight", ("wte.weight",)),
        Rule("positional.embedding.weight", ("wpe.weight",)),
        Rule("lm_head.weight", ("wte.weight",) if config.tie_weights else ("lm_head.weight",)),
    ]
    for i in range(config.num_layers):
        src, dst = f"h.{i}", f"decoder.layers.{i}"
        rules += pair(f"{dst}.norm1", f"{src}.ln_1")
        rules += pair(f"{dst}.self_attn.in_proj", f"{src}.attn.c_attn", transpose=True)
        rules += pair(f"{dst}.self_attn.out_proj", f"{src}.attn.c_proj", transpose=True)
        rules += pair(f"{dst}.norm3", f"{src}.ln_2")
        rules += pair(f"{dst}.ff.linear1", f"{src}.mlp.c_fc", transpose=True)
        rules += pair(f"{dst}.ff.linear2", f"{src}.mlp.c_proj", transpose=True)
    rules += pair("decoder.norm", "ln_f")
    return rules


def gpt2_problems(config: LanguageModelConfig) -> list[str]:
    """What of ``config`` a GPT-2 checkpoint cannot express (empty when it exports)."""
    c = config
    problems = []
    if c.positional != "learned":
        problems.append(f"positional={c.positional!r} (GPT-2 learns its positions: positional='learned')")
    if c.activation not in _EXPORT_ACTIVATIONS:
        problems.append(f"activation={c.activation!r} (GPT-2's MLP takes one of {', '.join(_EXPORT_ACTIVATIONS)})")
    if not c.norm_first:
        problems.append("norm_first=false (GPT-2 is pre-norm)")
    if not c.bias:
        problems.append("bias=false (every GPT-2 linear layer and LayerNorm has a bias)")
    if c.head_dim is not None and c.head_dim * c.num_heads != c.d_model:
        problems.append(f"head_dim={c.head_dim} (GPT-2's heads split d_model: head_dim = d_model / num_heads)")
    for field, value, default in _LLAMA_ONLY:
        if getattr(c, field, default) != default and not (field == "qkv_bias" and getattr(c, field) == c.bias):
            problems.append(f"{field}={getattr(c, field)!r} ({value})")
    return problems


# Fields of LanguageModelConfig GPT-2 has no equivalent for: (field, why, the value GPT-2 means).
_LLAMA_ONLY = (
    ("norm", "GPT-2 uses layernorm", "layernorm"),
    ("num_kv_heads", "GPT-2 has as many key/value heads as query heads", None),
    ("sliding_window", "GPT-2 attends to the whole context", None),
    ("qkv_bias", "GPT-2's q/k/v biases follow bias", None),
    ("qk_norm", "GPT-2 has no per-head norms of queries and keys", False),
)
_EXPORT_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


def hf_gpt2_config(config: LanguageModelConfig) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (dict) of a GPT-2-style attnkit config (see :func:`gpt2_problems`)."""
    c = config
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": c.vocab_size,
        "n_positions": c.max_len,
        "n_embd": c.d_model,
        "n_layer": c.num_layers,
        "n_head": c.num_heads,
        "n_inner": c.dim_feedforward,
        "activation_function": _EXPORT_ACTIVATIONS[c.activation],
        "layer_norm_epsilon": c.layer_norm_eps,
        "resid_pdrop": c.dropout,
        "embd_pdrop": c.dropout,
        "attn_pdrop": c.dropout,
        "tie_word_embeddings": c.tie_weights,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "dtype": "float32",
    }


def gpt2_claims(config: LanguageModelConfig) -> bool:
    """A config without rotary positions, RMSNorm or SwiGLU is meant as GPT-2's."""
    return not (config.positional == "rotary" or config.norm == "rmsnorm" or config.activation == "swiglu")


Family(
    model_type="gpt2",
    description="GPT-2 decoders (GPT2LMHeadModel, GPT2Model)",
    title="GPT-2",
    model="lm",
    encoder=False,
    build=LanguageModel,
    config=lambda hf, reading: gpt2_config(hf, eos_id=reading.eos_id, source=reading.source),
    normalize=normalize_gpt2_names,
    rules=gpt2_rules,
    ignored=gpt2_ignored,
    embedding="wte.weight",
    prefix="transformer.",
    hf_config=hf_gpt2_config,
    claims=gpt2_claims,
    problems=gpt2_problems,
    group="a GPT-2",
    needs="GPT-2 models positional='learned', norm='layernorm', bias=true",
).register()
