"""Typed, validated configuration objects shared by the model families."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from attnkit.config import StrictModel

__all__ = ["EncoderConfig", "StrictModel"]


class EncoderConfig(StrictModel):
    """The Transformer stack shared by every encoder model."""

    d_model: int = Field(128, gt=0, description="model width")
    num_heads: int = Field(4, gt=0, description="attention heads; must divide d_model unless head_dim is set")
    num_layers: int = Field(2, gt=0, description="encoder blocks")
    dim_feedforward: int = Field(512, gt=0, description="hidden width of the feed-forward network")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout in attention, feed-forward and residuals")
    activation: Literal["relu", "gelu", "gelu_tanh", "swiglu"] = "relu"
    norm_first: bool = Field(False, description="pre-norm instead of the paper's post-norm")
    head_dim: int | None = Field(None, gt=0, description="per-head width (default d_model // num_heads)")

    @model_validator(mode="after")
    def _check(self) -> EncoderConfig:
        # Checked here rather than by Field constraints, so that subclasses that change a
        # default (e.g. `dropout: float = 0.0`) keep the check.
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

    def stack_kwargs(self) -> dict[str, object]:
        """Keyword arguments for :class:`attnkit.nn.TransformerEncoder`."""
        return dict(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dim_feedforward=self.dim_feedforward,
            dropout=self.dropout,
            activation=self.activation,
            norm_first=self.norm_first,
            head_dim=self.head_dim,
        )
