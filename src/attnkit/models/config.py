"""Typed, validated configuration objects shared by the model families.

* :class:`EncoderConfig`: the Transformer stack every family shares (width, heads, depth, feed-forward,
  norm...). Its :meth:`EncoderConfig.stack_spec` is the :class:`attnkit.nn.StackSpec` the models build.
* :class:`OneOf`: a ``str`` field whose choices are a registry's names (``Annotated[str, OneOf(NORMS)]``):
  validated against the registry when the config is validated, listed in the JSON schema.
* Family defaults: a family that wants other defaults for inherited fields says so once, in
  ``field_overrides`` (``field_overrides = {"d_model": 768}``, :class:`attnkit.config.StrictModel`),
  instead of declaring the fields again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from attnkit.config import StrictModel
from attnkit.nn import ACTIVATIONS, Registry, StackSpec

__all__ = ["EncoderConfig", "OneOf", "StrictModel", "choices_text"]


def choices_text(names: tuple[str, ...] | list[str]) -> str:
    """``'a', 'b' or 'c'`` (pydantic's wording for a ``Literal``)."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


@dataclass(frozen=True)
class OneOf:
    """``Annotated[str, OneOf(registry, exclude=(...))]``: one of the registry's names (but ``exclude``).

    The names are read when a config is validated, so a kind registered later (a new positional
    encoding) is accepted at once; the JSON schema lists the names registered by then as an ``enum``.
    """

    registry: Registry[Any]
    exclude: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(n for n in self.registry.names() if n not in self.exclude)

    def _check(self, value: str) -> str:
        names = self.names()
        if value not in names:
            raise ValueError(f"Input should be {choices_text(names)} (the registered {self.registry.kind} kinds)")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out["enum"] = list(self.names())
        return out


class EncoderConfig(StrictModel):
    """The Transformer stack shared by every model family."""

    d_model: int = Field(128, gt=0, description="model width")
    num_heads: int = Field(4, gt=0, description="attention heads; must divide d_model unless head_dim is set")
    num_layers: int = Field(2, gt=0, description="encoder blocks")
    dim_feedforward: int = Field(512, gt=0, description="hidden width of the feed-forward network")
    dropout: float = Field(
        0.1,
        description="dropout in attention, feed-forward and residuals, in [0, 1)",
        json_schema_extra={"minimum": 0.0, "exclusiveMaximum": 1.0},  # (checked by _check, one message)
    )
    activation: Annotated[str, OneOf(ACTIVATIONS)] = Field(
        "relu", description="feed-forward: swiglu is LLaMA's gated MLP down(silu(gate(x)) * up(x))"
    )
    norm_first: bool = Field(False, description="pre-norm instead of the paper's post-norm")
    head_dim: int | None = Field(None, gt=0, description="per-head width (default d_model // num_heads)")

    @model_validator(mode="after")
    def _check(self) -> EncoderConfig:
        # Checked here rather than by Field constraints: one message, whatever the family.
        for name in ("d_model", "num_heads", "num_layers", "dim_feedforward"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.head_dim is None and self.d_model % self.num_heads != 0:
            options = [h for h in range(1, min(self.d_model, 1024) + 1) if self.d_model % h == 0][:10]
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide d_model ({self.d_model}); "
                f"choose num_heads in {options} or set head_dim"
            )
        return self

    def stack_spec(self, **fields: Any) -> StackSpec:
        """The :class:`attnkit.nn.StackSpec` of this config's stack; ``fields`` set the others (a family's
        norm, positions, ...) or override these (e.g. the decoder's ``num_layers``)."""
        base: dict[str, Any] = dict(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dim_feedforward=self.dim_feedforward,
            dropout=self.dropout,
            activation=self.activation,
            norm_first=self.norm_first,
            head_dim=self.head_dim,
        )
        return StackSpec(**{**base, **fields})
