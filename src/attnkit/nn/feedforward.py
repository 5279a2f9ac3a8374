"""Position-wise feed-forward network."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ACTIVATIONS", "FeedForward"]

Activation = Literal["relu", "gelu", "gelu_tanh", "swiglu"]
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_tanh", "swiglu")


class FeedForward(nn.Module):
    """``W2 · dropout(act(W1 x))`` applied to every position of ``x [B, T, D]``.

    ``activation`` is ``"relu"`` (the paper), ``"gelu"``, ``"gelu_tanh"`` (GPT-2's
    approximation) or ``"swiglu"`` (``W2 · (silu(W1 x) * W3 x)``, as in LLaMA).
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        *,
        dropout: float = 0.0,
        activation: Activation = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
        self.activation = activation
        gated = activation == "swiglu"
        self.linear1 = nn.Linear(dim, 2 * hidden_dim if gated else hidden_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(hidden_dim, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.linear1(x)
        if self.activation == "relu":
            h = F.relu(h, inplace=True)  # h is fresh and unused elsewhere: saves a copy
        elif self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        return self.linear2(self.dropout(h))
