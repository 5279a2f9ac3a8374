"""``"alibi"``: ALiBi biases ``-slope_h * |query position - key position|`` on the self-attention scores."""

from __future__ import annotations

from typing import Self

import torch
from torch import Tensor

from attnkit.nn.masks import alibi_bias
from attnkit.nn.positional import PositionalEncoding, alibi_slopes
from attnkit.nn.positions.base import POSITIONS
from attnkit.nn.specs import StackSpec


@POSITIONS.register("alibi")
class AlibiPositions(PositionalEncoding):
    """Head slopes :func:`alibi_slopes` (a non-persistent buffer ``slopes [H]``); positions are column
    indices, so left padding does not change the distances."""

    acts_in_attention = True
    slopes: Tensor

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    @classmethod
    def from_spec(cls, spec: StackSpec) -> Self:
        return cls(spec.num_heads)

    def attention_bias(self, q_len: int, k_len: int, device: torch.device) -> Tensor | None:
        return alibi_bias(self.slopes, q_len, k_len, device=device)
