"""The decoder-only language model's configuration: :class:`LanguageModelArchitecture` (the shape, with
named presets in :data:`PRESETS`), :class:`LanguageModelConfig` (plus the vocabulary) and :class:`RopeScaling`."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from attnkit.models.config import EncoderConfig, OneOf, StrictModel
from attnkit.nn import NORMS, POSITIONS, StackSpec

__all__ = ["PRESETS", "LanguageModelArchitecture", "LanguageModelConfig", "RopeScaling"]


class RopeScaling(StrictModel):
    """Rotary context extension, as Hugging Face transformers' ``rope_scaling`` / ``rope_type``.

    ``type``: ``"linear"`` (inverse frequencies divided by ``factor``), ``"dynamic"`` (NTK-aware: the
    base grows with the sequence once it exceeds ``original_max_position_embeddings``) or ``"llama3"``
    (Llama 3.1's per-wavelength blend of the two, with ``low_freq_factor`` / ``high_freq_factor``).
    ``original_max_position_embeddings``: the pre-training context; ``None`` = 8192 for ``llama3``
    (Llama 3.1's) and the model's ``max_len`` otherwise (transformers' ``max_position_embeddings``).
    """

    type: Literal["linear", "dynamic", "llama3"]
    factor: float = Field(..., gt=0.0)
    low_freq_factor: float = Field(1.0, gt=0.0)
    high_freq_factor: float = Field(4.0, gt=0.0)
    original_max_position_embeddings: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check_factors(self) -> RopeScaling:
        if self.type == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"llama3 rope_scaling needs high_freq_factor > low_freq_factor, "
                f"got {self.high_freq_factor} and {self.low_freq_factor}"
            )
        return self

    def as_mapping(self, max_len: int) -> dict[str, object]:
        """The ``rope_scaling`` mapping of :class:`attnkit.nn.StackSpec` (``original_max_position_embeddings``
        resolved for a model of context ``max_len``)."""
        original = self.original_max_position_embeddings
        if original is None:
            original = 8192 if self.type == "llama3" else max_len
        return dict(
            type=self.type,
            factor=self.factor,
            low_freq_factor=self.low_freq_factor,
            high_freq_factor=self.high_freq_factor,
            original_max_position_embeddings=original,
        )


_LLAMA: dict[str, Any] = dict(
    norm="rmsnorm",
    activation="swiglu",
    positional="rotary",
    bias=False,
    qkv_bias=None,
    tie_weights=False,
    norm_first=True,
    layer_norm_eps=1e-6,
    sliding_window=None,
)
PRESETS: dict[str, dict[str, Any]] = {
    "gpt2": dict(
        norm="layernorm",
        activation="gelu_tanh",
        positional="learned",
        bias=True,
        qkv_bias=None,
        tie_weights=True,
        norm_first=True,
        layer_norm_eps=1e-5,
        sliding_window=None,
    ),
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "sliding_window": 4096},
    "qwen2": {**_LLAMA, "qkv_bias": True},
}
"""The family of each preset: the fields it sets (sizes are left to the config)."""


class LanguageModelArchitecture(EncoderConfig):
    """Everything of a language model but its vocabulary (the stack fields as :class:`EncoderConfig`;
    by default 4 pre-norm GELU blocks); tasks build their ``model`` config section on it and add the
    vocabulary from their data.

    ``preset`` (``"gpt2"``, ``"llama"``, ``"mistral"``, ``"qwen2"``) sets the family's fields
    (:data:`PRESETS`: norm, activation, positions, biases, tied head, sliding window) that are not given;
    a field given keeps its value, even its class default (``preset="llama", tie_weights=True`` stays
    tied). :meth:`from_preset` does the same from Python.
    """

    field_overrides: ClassVar[dict[str, Any]] = {"num_layers": 4, "activation": "gelu", "norm_first": True}

    preset: Literal["gpt2", "llama", "mistral", "qwen2"] | None = Field(
        None, description="a model family's architecture: gpt2, llama, mistral or qwen2"
    )
    norm: Annotated[str, OneOf(NORMS)] = Field("layernorm", description="LayerNorm or RMSNorm (eps: layer_norm_eps)")
    positional: Annotated[str, OneOf(POSITIONS, exclude=("none",))] = "learned"
    max_len: int = Field(256, gt=0, description="the context: most positions the model attends over")
    tie_weights: bool = Field(True, description="lm_head shares its weight with token_embedding")
    bias: bool = Field(True, description="biases in the linear layers and LayerNorms")
    qkv_bias: bool | None = Field(None, description="biases in the q/k/v projections (None = follow bias)")
    qk_norm: bool = Field(False, description="a norm over each query and key head before rotary positions")
    attn_scale: float | None = Field(
        None, gt=0.0, description="the attention scores' scale (None = head_dim ** -0.5; Gemma 3: its 256 ** -0.5)"
    )
    sandwich_norm: bool = Field(
        False, description="pre-norm blocks also norm each sublayer's output before its residual add (Gemma 2/3)"
    )
    embed_scale: bool = Field(
        False, description="token embeddings times sqrt(d_model), rounded to their dtype (Gemma; the head is not)"
    )
    layer_norm_eps: float = Field(1e-5, gt=0.0)
    num_kv_heads: int | None = Field(
        None, gt=0, description="key/value heads (grouped-query attention): None = num_heads, 1 = multi-query"
    )
    rope_theta: float = Field(10000.0, gt=0.0, description="rotary base")
    rope_scaling: RopeScaling | None = None
    sliding_window: int | None = Field(
        None, gt=0, description="each token attends to at most the last sliding_window tokens (itself included)"
    )
    sliding_window_pattern: int | None = Field(
        None,
        ge=2,
        description="with sliding_window: every sliding_window_pattern-th layer is global (attends to every token), "
        "the others slide (Gemma 3: 6); None = every layer slides",
    )
    rope_local_theta: float | None = Field(
        None,
        gt=0.0,
        description="with sliding_window_pattern: the sliding layers' own rotary base, unscaled (rope_theta and "
        "rope_scaling are then the global layers'); None = one rotary base",
    )
    mlp: bool = Field(
        True,
        description="a feed-forward sublayer (MLP) in each block; false: attention-only blocks (no MLP and no norm "
        "before it; dim_feedforward is then unused and must stay at its default)",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if not isinstance(name, str) or name not in PRESETS:  # (a list is unhashable)
            return data  # the field's own validation names the choices
        # The preset fills the fields not given, i.e. not keys of the input (what pydantic records as the
        # model's model_fields_set); a field given its own class default keeps it (tie_weights=True with llama).
        return {**PRESETS[name], **data}

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Self:
        """The ``name`` family's architecture (:data:`PRESETS`) with ``overrides`` (e.g. sizes) on top."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.model_validate({**PRESETS[name], **overrides, "preset": name})

    @model_validator(mode="after")
    def _check_positions(self) -> LanguageModelArchitecture:
        head_dim = self.head_dim or self.d_model // self.num_heads
        if self.positional == "rotary" and head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        if self.rope_scaling is not None and self.positional != "rotary":
            raise ValueError(f"rope_scaling needs positional='rotary', got positional={self.positional!r}")
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            options = [h for h in range(1, min(self.num_heads, 1024) + 1) if self.num_heads % h == 0][:10]
            raise ValueError(
                f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}); choose one of {options}"
            )
        if self.sliding_window_pattern is not None and self.sliding_window is None:
            raise ValueError(
                f"sliding_window_pattern={self.sliding_window_pattern} interleaves sliding and global layers: set "
                "sliding_window too (the sliding layers' window), or leave sliding_window_pattern out"
            )
        if self.rope_local_theta is not None and (self.sliding_window_pattern is None or self.positional != "rotary"):
            raise ValueError(
                "rope_local_theta is the sliding layers' rotary base: it needs positional='rotary' and a "
                "sliding_window_pattern (sliding and global layers interleaved); leave it out otherwise"
            )
        if self.sandwich_norm and not self.norm_first:
            raise ValueError("sandwich_norm=true norms a pre-norm block's sublayer outputs: it needs norm_first=true")
        if not self.mlp:
            default = type(self).model_fields["dim_feedforward"].default
            if self.dim_feedforward != default:
                raise ValueError(
                    f"mlp=false builds attention-only blocks, which have no feed-forward layer, yet dim_feedforward="
                    f"{self.dim_feedforward} sets its width; leave dim_feedforward out (at its default, "
                    f"{default}) or set mlp=true"
                )
        return self

    def stack_spec(self, **fields: Any) -> StackSpec:
        """The :class:`attnkit.nn.StackSpec` of the decoder stack (without cross-attention)."""
        own: dict[str, Any] = dict(
            bias=self.bias,
            layer_norm_eps=self.layer_norm_eps,
            cross_attention=False,
            norm=self.norm,
            num_kv_heads=self.num_kv_heads,
            qkv_bias=self.qkv_bias,
            qk_norm=self.qk_norm,
            attn_scale=self.attn_scale,
            sandwich_norm=self.sandwich_norm,
            positional=self.positional,
            max_len=self.max_len,
            rope_theta=self.rope_theta,
            rope_scaling=None if self.rope_scaling is None else self.rope_scaling.as_mapping(self.max_len),
            sliding_window=self.sliding_window,
            sliding_window_pattern=self.sliding_window_pattern,
            rope_local_theta=self.rope_local_theta,
            mlp=self.mlp,
        )
        return super().stack_spec(**{**own, **fields})


class LanguageModelConfig(LanguageModelArchitecture):
    """A decoder-only language model: the architecture, the vocabulary size and its special ids."""

    vocab_size: int = Field(..., gt=0, description="token ids lie in [0, vocab_size)")
    pad_id: int = Field(0, ge=0)
    bos_id: int = Field(1, ge=0)
    eos_id: int = Field(2, ge=0)

    @model_validator(mode="after")
    def _check_lm(self) -> LanguageModelConfig:
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(self, name) >= self.vocab_size:
                raise ValueError(f"{name} ({getattr(self, name)}) must be < vocab_size ({self.vocab_size})")
        return self
