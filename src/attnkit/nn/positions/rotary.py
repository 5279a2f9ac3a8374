"""``"rotary"``: rotary position embeddings (RoPE) of the self-attention's queries and keys."""

from __future__ import annotations

from typing import Self

import torch
from torch import Tensor

from attnkit.nn.positional import PositionalEncoding, RotaryEmbedding
from attnkit.nn.positions.base import POSITIONS
from attnkit.nn.specs import StackSpec


@POSITIONS.register("rotary")
class RotaryPositions(PositionalEncoding):
    """A :class:`RotaryEmbedding` (``spec.rope_theta``, ``spec.rope_scaling``) of the head dimension."""

    acts_in_attention = True

    @classmethod
    def from_spec(cls, spec: StackSpec) -> Self:
        return cls(spec)

    def __init__(self, spec: StackSpec) -> None:
        super().__init__()
        scaling = dict(spec.rope_scaling or {})
        scaling_type = scaling.pop("type", None)
        if scaling_type is not None:
            scaling["scaling"] = scaling_type
        self.rotary = RotaryEmbedding(spec.attention_head_dim, base=spec.rope_theta, **scaling)

    def rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        return self.rotary.cos_sin(positions, dtype)

    def rotary_embedding(self) -> RotaryEmbedding | None:
        return self.rotary
