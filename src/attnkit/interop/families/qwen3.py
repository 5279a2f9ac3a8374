"""Qwen3 (Hugging Face ``model_type: qwen3``) <-> :class:`attnkit.models.LanguageModel`.

The Llama architecture (see :mod:`attnkit.interop.families.llama`) with a per-head RMSNorm on the
queries and on the keys (``q_norm`` / ``k_norm``, over ``head_dim``, applied before the rotary
positions: attnkit's ``qk_norm``), no q/k/v biases, and Qwen2's sliding-window settings
(``use_sliding_window``, ``max_window_layers``). Its ``head_dim`` is usually set on its own
(128 with a ``hidden_size`` that is not ``num_attention_heads * 128``).
"""

from __future__ import annotations

from typing import Any

from attnkit.interop.families.llama import (
    decoder_family,
    llama_config,
    llama_like,
    llama_problems,
    llama_rules,
    switched_window,
)
from attnkit.interop.family import Reading
from attnkit.interop.weights import Rule
from attnkit.models.lm import LanguageModelConfig

__all__ = ["qwen3_config", "qwen3_problems", "qwen3_rules"]


def qwen3_config(hf: dict[str, Any], reading: Reading) -> LanguageModelConfig:
    """The attnkit config of a Qwen3 ``config.json``: Llama's mapping with ``qk_norm=True``."""
    return llama_config(
        hf,
        bos_id=reading.bos_id,
        eos_id=reading.eos_id,
        source=reading.source,
        switched_window=True,
        qk_norm=True,
    )


def qwen3_rules(config: LanguageModelConfig) -> list[Rule]:
    """Llama's rules and each layer's ``q_norm`` / ``k_norm`` weights."""
    rules = llama_rules(config)
    for i in range(config.num_layers):
        for norm in ("q_norm", "k_norm"):
            rules.append(Rule(f"decoder.layers.{i}.self_attn.{norm}.weight", (f"layers.{i}.self_attn.{norm}.weight",)))
    return rules


def qwen3_problems(config: LanguageModelConfig) -> list[str]:
    """What of ``config`` a Qwen3 checkpoint cannot express: Llama's limits with ``qk_norm`` required,
    and no q/k/v biases."""
    problems = llama_problems(config, qk_norm=True)
    if config.qkv_bias:
        problems.append("qkv_bias=true (Qwen3 has no q/k/v biases)")
    return problems


decoder_family(
    "qwen3",
    "Qwen3ForCausalLM",
    "Qwen3",
    config=qwen3_config,
    rules=qwen3_rules,
    hf_extra=lambda c: switched_window(c) | {"attention_bias": False},
    claims=lambda c: llama_like(c) and c.qk_norm,
    problems=qwen3_problems,
    group="a Qwen3",
    needs="Qwen3 models need the Llama-family settings with qk_norm=true",
).register()
