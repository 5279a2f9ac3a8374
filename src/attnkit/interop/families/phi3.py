"""Phi-3 (Hugging Face ``model_type: phi3``) <-> :class:`attnkit.models.LanguageModel`.

The Llama architecture (see :mod:`attnkit.interop.families.llama`) with fused weights: one
``qkv_proj`` (the query rows, then the key rows, then the value rows: attnkit's ``in_proj`` as it is)
and one ``gate_up_proj`` (the gate rows, then the up rows: attnkit's SwiGLU ``linear1`` as it is),
and a sliding window on every layer where ``sliding_window`` is set. Rotary positions: the default
(``rope_parameters`` without scaling); Phi-3's ``longrope`` (``su``) scaling, per-frequency factors
that switch past ``original_max_position_embeddings``, is refused, as is a ``partial_rotary_factor``
below 1 (Phi-4-mini).

A Phi-3 model computes what a Llama one does: :func:`attnkit.interop.export_hf` writes it as ``llama``
(or ``mistral``, with a window) unless asked for ``model_type="phi3"``.
"""

from __future__ import annotations

from typing import Any

from attnkit.interop.families.llama import decoder_end_rules, decoder_family, llama_config, llama_problems
from attnkit.interop.family import Reading
from attnkit.interop.weights import Rule
from attnkit.models.lm import LanguageModelConfig

__all__ = ["phi3_config", "phi3_problems", "phi3_rules"]


def phi3_config(hf: dict[str, Any], reading: Reading) -> LanguageModelConfig:
    """The attnkit config of a Phi-3 ``config.json`` (Llama's mapping; Phi-3 has no q/k/v biases)."""
    return llama_config(hf, bos_id=reading.bos_id, eos_id=reading.eos_id, source=reading.source)


def phi3_rules(config: LanguageModelConfig) -> list[Rule]:
    """How each tensor of a Phi-3 :class:`LanguageModel` is made from the file (names without ``model.``)."""
    rules = decoder_end_rules(config)
    for i in range(config.num_layers):
        src, dst = f"layers.{i}", f"decoder.layers.{i}"
        rules += [
            Rule(f"{dst}.self_attn.in_proj.weight", (f"{src}.self_attn.qkv_proj.weight",)),
            Rule(f"{dst}.self_attn.out_proj.weight", (f"{src}.self_attn.o_proj.weight",)),
            Rule(f"{dst}.norm1.weight", (f"{src}.input_layernorm.weight",)),
            Rule(f"{dst}.norm3.weight", (f"{src}.post_attention_layernorm.weight",)),
            Rule(f"{dst}.ff.linear1.weight", (f"{src}.mlp.gate_up_proj.weight",)),
            Rule(f"{dst}.ff.linear2.weight", (f"{src}.mlp.down_proj.weight",)),
        ]
    return rules


def phi3_problems(config: LanguageModelConfig) -> list[str]:
    """What of ``config`` a Phi-3 checkpoint cannot express: Llama's limits, no q/k/v biases and
    no rope scaling (Phi-3 knows only longrope)."""
    problems = llama_problems(config)
    if config.qkv_bias:
        problems.append("qkv_bias=true (Phi-3 has no q/k/v biases)")
    if config.rope_scaling is not None:
        problems.append(f"rope_scaling {config.rope_scaling.type!r} (Phi-3 configs scale with longrope only)")
    return problems


def _hf_extra(config: LanguageModelConfig) -> dict[str, Any]:
    return {
        "sliding_window": config.sliding_window,
        "original_max_position_embeddings": config.max_len,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
    }


decoder_family(
    "phi3",
    "Phi3ForCausalLM",
    "Phi-3",
    config=phi3_config,
    rules=phi3_rules,
    hf_extra=_hf_extra,
    claims=lambda c: False,  # a Llama-shaped config is written as llama unless phi3 is asked for
    problems=phi3_problems,
    group="a Phi-3",
).register()
