"""Llama, Mistral and Qwen2 (Hugging Face ``model_type`` ``llama`` / ``mistral`` / ``qwen2``) <->
:class:`attnkit.models.LanguageModel`.

The three share one architecture: token embedding (no position embedding), per layer RMSNorm ->
causal self-attention with rotary positions (HF's rotate-half layout) and grouped-query attention
(``num_key_value_heads`` key/value heads; separate ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``)
-> RMSNorm -> SwiGLU MLP ``down(silu(gate(x)) * up(x))``, a final RMSNorm and an output layer
(``lm_head``, optionally tied to the embedding). Mistral adds a sliding attention window; Qwen2
adds biases to the q, k and v projections (and may use a sliding window on its upper layers).
No linear layer has a bias otherwise and RMSNorm has only a weight.

Rotary settings come from ``rope_parameters`` (transformers 5) or ``rope_theta`` + ``rope_scaling``
(older files): default, ``linear``, ``dynamic`` and ``llama3`` scaling are supported.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.interop.family import Family, Reading
from attnkit.interop.hfconfig import reading_config
from attnkit.interop.weights import Rule
from attnkit.models.lm import LanguageModel, LanguageModelConfig

__all__ = [
    "decoder_family",
    "hf_llama_config",
    "llama_config",
    "llama_ignored",
    "llama_like",
    "llama_problems",
    "llama_rules",
    "normalize_llama_names",
]

ROPE_TYPES = ("default", "linear", "dynamic", "llama3")
HEAD_PREFIXES = ("score.", "qa_outputs.", "classifier.")
# Keys of rope_parameters / rope_scaling that each supported type reads (others are refused).
# transformers' dynamic scaling starts past max_position_embeddings: it ignores an
# original_max_position_embeddings, and so does attnkit's import.
_ROPE_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
}


def _rope(hf: dict[str, Any], source: str) -> tuple[float, dict[str, Any] | None]:
    """``(rope_theta, rope_scaling or None)`` of a config, in attnkit's ``RopeScaling`` fields."""
    params = hf.get("rope_parameters")
    if not isinstance(params, dict):
        params = dict(hf.get("rope_scaling") or {})
        params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    params = dict(params)
    theta = float(params.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    partial = params.pop("partial_rotary_factor", 1.0)
    if partial not in (1, 1.0, None):
        raise ConfigError(f"{source}: partial_rotary_factor={partial} is not supported (only 1.0: rotary on every dim)")
    kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if kind not in ROPE_TYPES:
        raise ConfigError(
            f"{source}: rope scaling type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)}); "
            "attnkit cannot compute this model's rotary positions"
        )
    if kind == "dynamic":
        params.pop("original_max_position_embeddings", None)
    extra = sorted(k for k, v in params.items() if k not in _ROPE_KEYS[kind] and v is not None)
    if extra:
        raise ConfigError(f"{source}: rope scaling {kind!r} with {extra} is not supported")
    if kind == "default":
        return theta, None
    if "factor" not in params:
        raise ConfigError(f"{source}: rope scaling {kind!r} needs a 'factor'")
    scaling: dict[str, Any] = {"type": kind, "factor": float(params["factor"])}
    for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        if params.get(key) is not None:
            scaling[key] = params[key]
    if kind == "dynamic":
        scaling["original_max_position_embeddings"] = hf.get("max_position_embeddings")
    return theta, scaling


def _sliding_window(hf: dict[str, Any], switched: bool, source: str) -> int | None:
    """The attention window of every layer, or ``None``; layers with different windows are refused.
    ``switched``: the window is on only with ``use_sliding_window``, from layer ``max_window_layers`` on
    (Qwen2's configs and those of the families that share their settings)."""
    window = hf.get("sliding_window")
    if switched and not hf.get("use_sliding_window", False):
        window = None
    if window is None:
        return None
    layer_types = hf.get("layer_types")
    if layer_types is None and switched:
        start = hf.get("max_window_layers", 0)
        layer_types = ["sliding_attention" if i >= start else "full_attention" for i in range(hf["num_hidden_layers"])]
    kinds = set(layer_types or ["sliding_attention"])
    if kinds == {"full_attention"}:
        return None
    if kinds != {"sliding_attention"}:
        raise ConfigError(
            f"{source}: a sliding window on some layers only (layer_types / max_window_layers) is not supported; "
            "attnkit applies one window to every layer"
        )
    return int(window)


def _first_id(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def llama_config(
    hf: dict[str, Any],
    *,
    bos_id: int | None,
    eos_id: int | None,
    source: str,
    qkv_bias: bool = False,
    switched_window: bool = False,
    **fields: Any,
) -> LanguageModelConfig:
    """The attnkit config of a Hugging Face ``config.json`` (dict) of the Llama architecture or a variant.

    ``bos_id`` / ``eos_id`` (from the tokenizer) win over the config's ``bos_token_id`` /
    ``eos_token_id`` (a list: its first id); a missing BOS is the EOS (Qwen2 has none) and a
    missing pad id is the EOS. ``qkv_bias``: the variant has q/k/v biases; ``switched_window``: its
    window is read as Qwen2's (see :func:`_sliding_window`); ``fields``: more of the attnkit config
    (a variant's own settings, e.g. ``qk_norm=True``).
    """
    family = hf["model_type"]
    unsupported = []
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        unsupported.append(f"hidden_act={act!r} (only 'silu', the SwiGLU MLP)")
    if hf.get("mlp_bias"):
        unsupported.append("mlp_bias=true (biases in the MLP)")
    if hf.get("attention_bias"):
        unsupported.append("attention_bias=true (biases in the attention projections of a llama)")
    if hf.get("pretraining_tp", 1) not in (1, None):
        unsupported.append(f"pretraining_tp={hf['pretraining_tp']} (only 1)")
    if hf.get("partial_rotary_factor", 1.0) not in (1, 1.0, None):
        unsupported.append(f"partial_rotary_factor={hf['partial_rotary_factor']} (only 1.0)")
    if unsupported:
        raise ConfigError(f"{source}: this {family} variant is not supported: {'; '.join(unsupported)}")
    with reading_config(source, family):
        theta, scaling = _rope(hf, source)
        vocab_size, d_model, num_heads = hf["vocab_size"], hf["hidden_size"], hf["num_attention_heads"]
        head_dim = hf.get("head_dim") or d_model // num_heads
        kv_heads = hf.get("num_key_value_heads") or num_heads
        ids = [i for i in (eos_id, _first_id(hf.get("eos_token_id"))) if i is not None and 0 <= i < vocab_size]
        eos = ids[0] if ids else 0
        ids = [i for i in (bos_id, _first_id(hf.get("bos_token_id"))) if i is not None and 0 <= i < vocab_size]
        bos = ids[0] if ids else eos
        pad = _first_id(hf.get("pad_token_id"))
        pad = pad if pad is not None and 0 <= pad < vocab_size else eos
        return LanguageModelConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            num_heads=num_heads,
            num_kv_heads=kv_heads if kv_heads != num_heads else None,
            head_dim=head_dim if head_dim * num_heads != d_model else None,
            num_layers=hf["num_hidden_layers"],
            dim_feedforward=hf["intermediate_size"],
            dropout=hf.get("attention_dropout", 0.0),
            activation="swiglu",
            norm="rmsnorm",
            norm_first=True,
            positional="rotary",
            rope_theta=theta,
            rope_scaling=scaling,
            sliding_window=_sliding_window(hf, switched_window, source),
            max_len=hf["max_position_embeddings"],
            tie_weights=hf.get("tie_word_embeddings", False),
            bias=False,
            qkv_bias=qkv_bias,
            layer_norm_eps=hf.get("rms_norm_eps", 1e-6),
            pad_id=pad,
            bos_id=bos,
            eos_id=eos,
            **fields,
        )


def normalize_llama_names(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Without the ``model.`` prefix of ``...ForCausalLM`` (the base ``LlamaModel`` has none)."""
    return {name.removeprefix("model."): tensor for name, tensor in tensors.items()}


def llama_ignored(name: str) -> bool:
    """Tensors of a Llama-family file that are not the language model's: the rotary frequency
    buffers of old checkpoints (``rotary_emb.inv_freq``) and task heads."""
    return name.endswith("rotary_emb.inv_freq") or name.startswith(HEAD_PREFIXES)


def decoder_end_rules(config: LanguageModelConfig) -> list[Rule]:
    """The rules every Llama-style family shares outside its layers: the token embeddings, the output layer (the
    embeddings again when tied) and the final norm."""
    return [
        Rule("token_embedding.weight", ("embed_tokens.weight",)),
        Rule("lm_head.weight", ("embed_tokens.weight",) if config.tie_weights else ("lm_head.weight",)),
        Rule("decoder.norm.weight", ("norm.weight",)),
    ]


def llama_rules(config: LanguageModelConfig) -> list[Rule]:
    """How each tensor of a Llama-family :class:`LanguageModel` is made from the file (names
    without the ``model.`` prefix; :func:`attnkit.interop.weights.export_state_dict` reverses it)."""
    head_dim = config.head_dim or config.d_model // config.num_heads
    q_rows, kv_rows = config.num_heads * head_dim, (config.num_kv_heads or config.num_heads) * head_dim
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    rules = decoder_end_rules(config)
    for i in range(config.num_layers):
        src, dst = f"layers.{i}", f"decoder.layers.{i}"
        params = ("weight", "bias") if qkv_bias else ("weight",)
        for p in params:
            qkv = tuple(f"{src}.self_attn.{m}_proj.{p}" for m in "qkv")
            rules.append(Rule(f"{dst}.self_attn.in_proj.{p}", qkv, split=(q_rows, kv_rows, kv_rows)))
        gate_up = (f"{src}.mlp.gate_proj.weight", f"{src}.mlp.up_proj.weight")
        rules += [
            Rule(f"{dst}.self_attn.out_proj.weight", (f"{src}.self_attn.o_proj.weight",)),
            Rule(f"{dst}.norm1.weight", (f"{src}.input_layernorm.weight",)),
            Rule(f"{dst}.norm3.weight", (f"{src}.post_attention_layernorm.weight",)),
            Rule(f"{dst}.ff.linear1.weight", gate_up),
            Rule(f"{dst}.ff.linear2.weight", (f"{src}.mlp.down_proj.weight",)),
        ]
    return rules


def llama_like(config: LanguageModelConfig) -> bool:
    """A config with rotary positions, RMSNorm or SwiGLU is meant as a Llama-architecture one."""
    return config.positional == "rotary" or config.norm == "rmsnorm" or config.activation == "swiglu"


def _qkv_bias(config: LanguageModelConfig) -> bool:
    return config.bias if config.qkv_bias is None else config.qkv_bias


def llama_problems(config: LanguageModelConfig, *, qk_norm: bool = False) -> list[str]:
    """What of ``config`` a Llama-family checkpoint cannot express (empty when it exports); ``qk_norm``:
    the variant's attention has per-head query/key norms (and must)."""
    c = config
    qkv_bias = _qkv_bias(c)
    problems = []
    if c.positional != "rotary":
        problems.append(f"positional={c.positional!r} (Llama-family models use rotary positions)")
    if c.norm != "rmsnorm":
        problems.append(f"norm={c.norm!r} (they use rmsnorm)")
    if c.activation != "swiglu":
        problems.append(f"activation={c.activation!r} (they use swiglu)")
    if not c.norm_first:
        problems.append("norm_first=false (they are pre-norm)")
    if c.bias:
        problems.append("bias=true (they have no biases but q/k/v's in Qwen2: use bias=false, qkv_bias=true)")
    scaling = c.rope_scaling
    if (
        scaling is not None
        and scaling.type == "dynamic"
        and scaling.original_max_position_embeddings not in (None, c.max_len)
    ):
        problems.append(
            f"dynamic rope_scaling from original_max_position_embeddings={scaling.original_max_position_embeddings} "
            f"(transformers scales from max_position_embeddings, here max_len={c.max_len})"
        )
    if qkv_bias and c.sliding_window is not None:
        problems.append("qkv_bias together with sliding_window (Qwen2 has the biases, Mistral the window)")
    if c.qk_norm != qk_norm:
        problems.append(f"qk_norm={c.qk_norm} (this family {'has' if qk_norm else 'has no'} per-head q/k norms)")
    return problems


def hf_llama_config(config: LanguageModelConfig, family: str, architecture: str) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (dict) of an attnkit Llama-family config: the fields the variants
    share, for ``model_type`` ``family`` and the class ``architecture`` (``"LlamaForCausalLM"``)."""
    c = config
    head_dim = c.head_dim or c.d_model // c.num_heads
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        scaling = c.rope_scaling.model_dump(mode="json", exclude_none=True)
        kind = scaling.pop("type")
        rope = {"rope_type": kind, "rope_theta": c.rope_theta}
        rope |= {k: v for k, v in scaling.items() if k in _ROPE_KEYS[kind]}
    hf: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": family,
        "vocab_size": c.vocab_size,
        "hidden_size": c.d_model,
        "intermediate_size": c.dim_feedforward,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads or c.num_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_len,
        "rms_norm_eps": c.layer_norm_eps,
        "rope_parameters": rope,
        "tie_word_embeddings": c.tie_weights,
        "attention_dropout": c.dropout,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "dtype": "float32",
    }
    return hf


def switched_window(config: LanguageModelConfig) -> dict[str, Any]:
    """The window of Qwen2-style configs (``use_sliding_window``, from layer 0 on)."""
    window = config.sliding_window
    return {"use_sliding_window": window is not None, "sliding_window": window, "max_window_layers": 0}


_GROUP = "a Llama-family (llama/mistral/qwen2)"
_NEEDS = "Llama-family models need positional='rotary', norm='rmsnorm', activation='swiglu', bias=false"


def decoder_family(
    model_type: str,
    architecture: str,
    title: str,
    *,
    config: Any,
    hf_extra: Any,
    claims: Any,
    problems: Any = llama_problems,
    group: str = _GROUP,
    needs: str = _NEEDS,
    rules: Any = None,
) -> Family:
    """A :class:`Family` of the Llama architecture (token embedding, ``model.``-prefixed layers and
    ``lm_head``) with its own config mapping ``config(hf, reading)``, export extras ``hf_extra(config)``
    (over :func:`hf_llama_config`), ``claims`` and ``problems``; ``rules`` (default :func:`llama_rules`)."""
    return Family(
        model_type=model_type,
        description=f"{title} decoders ({architecture}, {architecture.replace('ForCausalLM', 'Model')})",
        title=title,
        model="lm",
        encoder=False,
        build=LanguageModel,
        config=config,
        normalize=normalize_llama_names,
        rules=rules or llama_rules,
        ignored=llama_ignored,
        embedding="embed_tokens.weight",
        prefix="model.",
        hf_config=lambda c: hf_llama_config(c, model_type, architecture) | hf_extra(c),
        claims=claims,
        problems=problems,
        group=group,
        needs=needs,
    )


def _reader(**options: Any) -> Any:
    def read(hf: dict[str, Any], r: Reading) -> LanguageModelConfig:
        return llama_config(hf, bos_id=r.bos_id, eos_id=r.eos_id, source=r.source, **options)

    return read


decoder_family(
    "llama",
    "LlamaForCausalLM",
    "Llama",
    config=_reader(),
    hf_extra=lambda c: {"attention_bias": False, "mlp_bias": False},
    claims=lambda c: llama_like(c) and not _qkv_bias(c) and c.sliding_window is None,
).register()
decoder_family(
    "mistral",
    "MistralForCausalLM",
    "Mistral",
    config=_reader(),
    hf_extra=lambda c: {"sliding_window": c.sliding_window},
    claims=lambda c: llama_like(c) and not _qkv_bias(c) and c.sliding_window is not None,
).register()
decoder_family(
    "qwen2",
    "Qwen2ForCausalLM",
    "Qwen2",
    config=_reader(qkv_bias=True, switched_window=True),
    hf_extra=switched_window,
    claims=lambda c: llama_like(c) and _qkv_bias(c),
).register()
