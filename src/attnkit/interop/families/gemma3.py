"""Gemma 3 text models (Hugging Face ``model_type: gemma3_text``, ``Gemma3ForCausalLM``) <->
:class:`attnkit.models.LanguageModel`.

The Llama layout (see :mod:`attnkit.interop.families.llama`: ``q/k/v/o_proj``, ``gate/up/down_proj``,
``model.``-prefixed layers, ``lm_head``) with Gemma's own pieces, each an attnkit setting:

- RMSNorm scaling by ``1 + weight`` in float32 (``norm="rmsnorm_offset"``), also per head on the queries
  and keys before the rotary positions (``qk_norm``);
- four norms per block: ``input_layernorm`` (``norm1``), ``post_attention_layernorm`` on the attention's
  output (``attn_out_norm``), ``pre_feedforward_layernorm`` (``norm3``), ``post_feedforward_layernorm`` on
  the MLP's output (``mlp_out_norm``): ``sandwich_norm``;
- the token embeddings times ``sqrt(hidden_size)`` rounded to their dtype (``embed_scale``; the tied head
  is not scaled);
- a GeGLU MLP with the tanh GELU (``activation="geglu_tanh"``);
- scores scaled by ``query_pre_attn_scalar ** -0.5`` (``attn_scale``);
- sliding-window layers and global layers interleaved (``layer_types``, or the older
  ``sliding_window_pattern``: ``sliding_window_pattern``), the sliding layers with their own rotary base
  (``rope_parameters["sliding_attention"]`` / ``rope_local_base_freq``: ``rope_local_theta``) and the
  global layers with ``rope_parameters["full_attention"]`` (``rope_theta`` + ``rope_scaling``).

Refused: logit soft-capping (Gemma 2's ``attn_logit_softcapping`` / ``final_logit_softcapping``),
bidirectional attention, attention biases, scaled sliding-layer rotary positions, and ``layer_types``
that no ``sliding_window_pattern`` gives. The multimodal ``gemma3`` checkpoints (``Gemma3ForConditionalGeneration``)
are not this family.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ConfigError
from attnkit.interop.families.llama import (
    decoder_end_rules,
    llama_config,
    llama_ignored,
    llama_problems,
    normalize_llama_names,
)
from attnkit.interop.family import Family, Reading
from attnkit.interop.hfconfig import reading_config
from attnkit.interop.weights import Rule
from attnkit.models.lm import LanguageModel, LanguageModelConfig

__all__ = ["gemma3_config", "gemma3_problems", "gemma3_rules", "hf_gemma3_config"]

MODEL_TYPE = "gemma3_text"
SLIDING, FULL = "sliding_attention", "full_attention"
_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")  # transformers' names of the tanh GELU
# What Gemma3TextConfig assumes when its config.json leaves them out.
_DEFAULTS: dict[str, Any] = {
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "sliding_window_pattern": 6,
    "query_pre_attn_scalar": 256,
    "tie_word_embeddings": True,
    "sliding_window": 4096,
}


def _layer_types(hf: dict[str, Any]) -> list[str]:
    """``layer_types``, or the older ``sliding_window_pattern``'s (every pattern-th layer global)."""
    types = hf.get("layer_types")
    if types is None:
        pattern = hf.get("sliding_window_pattern", _DEFAULTS["sliding_window_pattern"])
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(hf["num_hidden_layers"])]
    return list(types)


def _pattern(types: list[str], source: str) -> int:
    """The attnkit ``sliding_window_pattern`` of mixed ``layer_types`` (the first global layer's number)."""
    pattern = types.index(FULL) + 1
    if pattern >= 2 and types == [SLIDING if (i + 1) % pattern else FULL for i in range(len(types))]:
        return pattern
    raise ConfigError(
        f"{source}: layer_types {types} is not supported: attnkit interleaves them as Gemma 3 does, every "
        "sliding_window_pattern-th layer global and the others sliding"
    )


def _rope_parameters(hf: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The global and the sliding layers' rotary settings, in transformers 5's ``rope_parameters`` form."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and (FULL in params or SLIDING in params):
        full = dict(params.get(FULL) or {"rope_type": "default"})
        local = dict(params.get(SLIDING) or {"rope_type": "default"})
    else:  # transformers 4's keys
        full = dict(hf.get("rope_scaling") or {"rope_type": "default"})
        local = {
            "rope_type": "default",
            "rope_theta": hf.get("rope_local_base_freq", _DEFAULTS["rope_local_base_freq"]),
        }
    full.setdefault("rope_theta", hf.get("rope_theta", _DEFAULTS["rope_theta"]))
    local.setdefault("rope_theta", _DEFAULTS["rope_local_base_freq"])
    return full, local


def gemma3_config(hf: dict[str, Any], reading: Reading) -> LanguageModelConfig:
    """The attnkit config of a Gemma 3 text ``config.json`` (see the module's docstring for the mapping)."""
    source = reading.source
    unsupported = []
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(key) is not None:
            unsupported.append(f"{key}={hf[key]} (logit soft-capping)")
    if hf.get("use_bidirectional_attention"):
        unsupported.append("use_bidirectional_attention=true (only causal attention)")
    if hf.get("attention_bias"):
        unsupported.append("attention_bias=true (Gemma 3 has no biases)")
    act = hf.get("hidden_activation", hf.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in _ACTIVATIONS:
        unsupported.append(f"hidden_activation={act!r} (only the tanh GELU, {_ACTIVATIONS[0]!r})")
    if unsupported:
        raise ConfigError(f"{source}: this {MODEL_TYPE} model is not supported: {'; '.join(unsupported)}")
    with reading_config(source, MODEL_TYPE):
        full, local = _rope_parameters(hf)
        types = _layer_types(hf)
        if len(types) != hf["num_hidden_layers"] or not set(types) <= {SLIDING, FULL}:
            raise ConfigError(f"{source}: layer_types must be {hf['num_hidden_layers']} of {SLIDING!r} / {FULL!r}")
        window, pattern, local_theta = hf.get("sliding_window", _DEFAULTS["sliding_window"]), None, None
        if FULL not in types:  # every layer slides: all of them have the sliding layers' rotary positions
            full = local
        elif SLIDING not in types:
            window = None
        else:
            pattern = _pattern(types, source)
            if local.get("rope_type", "default") != "default" or set(local) - {"rope_type", "rope_theta"}:
                raise ConfigError(
                    f"{source}: scaled rotary positions on the sliding layers ({local}) are not supported"
                )
            local_theta = float(local["rope_theta"])
        if window is None and SLIDING in types:
            raise ConfigError(f"{source}: sliding_window is null but layer_types has {SLIDING!r} layers")
        # Llama's mapping of the shared keys (sizes, ids, the global rotary settings), then Gemma's settings.
        shared = {
            k: v for k, v in hf.items() if k not in ("rope_scaling", "rope_theta", "sliding_window", "hidden_act")
        }
        shared |= {"rope_parameters": full, "tie_word_embeddings": hf.get("tie_word_embeddings", True)}
        base = llama_config(shared, bos_id=reading.bos_id, eos_id=reading.eos_id, source=source)
        scalar = hf.get("query_pre_attn_scalar", _DEFAULTS["query_pre_attn_scalar"])
        gemma = dict(
            activation="geglu_tanh",
            norm="rmsnorm_offset",
            qk_norm=True,
            sandwich_norm=True,
            embed_scale=True,
            attn_scale=float(scalar) ** -0.5,
            sliding_window=None if window is None else int(window),
            sliding_window_pattern=pattern,
            rope_local_theta=local_theta,
        )
        return LanguageModelConfig.model_validate(base.model_dump(exclude_unset=True) | gemma)


def gemma3_rules(config: LanguageModelConfig) -> list[Rule]:
    """How each tensor of a Gemma 3 :class:`LanguageModel` is made from the file (names without ``model.``)."""
    head_dim = config.head_dim or config.d_model // config.num_heads
    q_rows, kv_rows = config.num_heads * head_dim, (config.num_kv_heads or config.num_heads) * head_dim
    rules = decoder_end_rules(config)
    for i in range(config.num_layers):
        src, dst = f"layers.{i}", f"decoder.layers.{i}"
        qkv = tuple(f"{src}.self_attn.{m}_proj.weight" for m in "qkv")
        norms = {
            "norm1": "input_layernorm",
            "attn_out_norm": "post_attention_layernorm",
            "norm3": "pre_feedforward_layernorm",
            "mlp_out_norm": "post_feedforward_layernorm",
            "self_attn.q_norm": "self_attn.q_norm",
            "self_attn.k_norm": "self_attn.k_norm",
        }
        rules += [
            Rule(f"{dst}.self_attn.in_proj.weight", qkv, split=(q_rows, kv_rows, kv_rows)),
            Rule(f"{dst}.self_attn.out_proj.weight", (f"{src}.self_attn.o_proj.weight",)),
            Rule(f"{dst}.ff.linear1.weight", (f"{src}.mlp.gate_proj.weight", f"{src}.mlp.up_proj.weight")),
            Rule(f"{dst}.ff.linear2.weight", (f"{src}.mlp.down_proj.weight",)),
        ]
        rules += [Rule(f"{dst}.{ours}.weight", (f"{src}.{theirs}.weight",)) for ours, theirs in norms.items()]
    return rules


def _query_pre_attn_scalar(config: LanguageModelConfig) -> int | None:
    """The integer ``query_pre_attn_scalar`` whose ``** -0.5`` is the config's scale exactly, or ``None``."""
    head_dim = config.head_dim or config.d_model // config.num_heads
    if config.attn_scale is None:
        return head_dim
    scalar = round(config.attn_scale**-2)
    return scalar if scalar > 0 and float(scalar) ** -0.5 == config.attn_scale else None


def gemma3_problems(config: LanguageModelConfig) -> list[str]:
    """What of ``config`` a Gemma 3 checkpoint cannot express (empty when it exports)."""
    c = config
    problems = [p for p in llama_problems(c, qk_norm=True) if not p.startswith(("norm=", "activation="))]
    if c.norm != "rmsnorm_offset":
        problems.append(f"norm={c.norm!r} (Gemma 3 uses rmsnorm_offset: RMSNorm scaled by 1 + weight)")
    if c.activation != "geglu_tanh":
        problems.append(f"activation={c.activation!r} (Gemma 3 uses geglu_tanh)")
    if c.qkv_bias:
        problems.append("qkv_bias=true (Gemma 3 has no biases)")
    if not c.sandwich_norm:
        problems.append("sandwich_norm=false (Gemma 3 norms each sublayer's output too)")
    if not c.embed_scale:
        problems.append("embed_scale=false (Gemma 3 scales its embeddings by sqrt(d_model))")
    if c.d_model % c.num_heads:
        problems.append(f"d_model={c.d_model} not a multiple of num_heads={c.num_heads} (transformers refuses it)")
    if _query_pre_attn_scalar(c) is None:
        problems.append(f"attn_scale={c.attn_scale} (Gemma 3 writes it as an integer query_pre_attn_scalar ** -0.5)")
    if c.rope_scaling is not None and c.sliding_window is not None and c.rope_local_theta is None:
        problems.append("rope_scaling on sliding layers (Gemma 3 scales the global layers' rotary positions only)")
    return problems


def hf_gemma3_config(config: LanguageModelConfig) -> dict[str, Any]:
    """The ``config.json`` (dict) of a Gemma 3 attnkit config."""
    c = config
    head_dim = c.head_dim or c.d_model // c.num_heads
    full: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        scaling = c.rope_scaling.model_dump(mode="json", exclude_none=True)
        full = {"rope_type": scaling.pop("type"), "rope_theta": c.rope_theta} | scaling
        if full["rope_type"] != "llama3":
            full = {k: v for k, v in full.items() if k in ("rope_type", "rope_theta", "factor")}
    pattern = c.sliding_window_pattern
    if c.sliding_window is None:
        types, local_theta = [FULL] * c.num_layers, _DEFAULTS["rope_local_base_freq"]
    else:
        types = [SLIDING if not pattern or (i + 1) % pattern else FULL for i in range(c.num_layers)]
        local_theta = c.rope_local_theta if c.rope_local_theta is not None else c.rope_theta
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": MODEL_TYPE,
        "vocab_size": c.vocab_size,
        "hidden_size": c.d_model,
        "intermediate_size": c.dim_feedforward,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads or c.num_heads,
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": c.max_len,
        "rms_norm_eps": c.layer_norm_eps,
        "tie_word_embeddings": c.tie_weights,
        "attention_bias": False,
        "attention_dropout": c.dropout,
        "query_pre_attn_scalar": _query_pre_attn_scalar(c),
        "sliding_window": c.sliding_window or c.max_len,  # (transformers builds a sliding mask even with none)
        "layer_types": types,
        "rope_parameters": {FULL: full, SLIDING: {"rope_type": "default", "rope_theta": local_theta}},
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "use_bidirectional_attention": False,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "dtype": "float32",
    }


Family(
    model_type=MODEL_TYPE,
    description="Gemma 3 text decoders (Gemma3ForCausalLM, Gemma3TextModel)",
    title="Gemma 3",
    model="lm",
    encoder=False,
    build=LanguageModel,
    config=gemma3_config,
    normalize=normalize_llama_names,
    rules=gemma3_rules,
    ignored=llama_ignored,
    embedding="embed_tokens.weight",
    prefix="model.",
    hf_config=hf_gemma3_config,
    claims=lambda c: c.norm == "rmsnorm_offset" or c.sandwich_norm,
    problems=gemma3_problems,
    group="a Gemma 3",
    needs="Gemma 3 models need norm='rmsnorm_offset', activation='geglu_tanh', qk_norm, sandwich_norm, embed_scale",
).register()
