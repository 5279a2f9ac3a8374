"""Position-wise feed-forward network, and the activations registered by name in :data:`ACTIVATIONS`.

A new activation is one ``ACTIVATIONS.add("name", ActivationKind(fn))`` (``gated=True`` for GLU
variants: the first linear layer is twice as wide and ``fn(gate) * up`` is used).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.nn.dropout import Dropout
from attnkit.nn.hooks import HookPoint
from attnkit.registry import Registry

__all__ = ["ACTIVATIONS", "Activation", "ActivationKind", "FeedForward"]

Activation = str
"""An activation's registered name (one of :data:`ACTIVATIONS`)."""


@dataclass(frozen=True)
class ActivationKind:
    """``fn`` applied to the hidden layer; ``gated``: GLU style, ``fn(gate) * up``."""

    fn: Callable[[Tensor], Tensor]
    gated: bool = False


def _relu(h: Tensor) -> Tensor:
    return F.relu(h, inplace=True)  # h is fresh and unused elsewhere: saves a copy


def _gelu(h: Tensor) -> Tensor:
    return F.gelu(h)


def _silu(h: Tensor) -> Tensor:
    return F.silu(h)


def _gelu_tanh(h: Tensor) -> Tensor:
    return F.gelu(h, approximate="tanh")


ACTIVATIONS: Registry[ActivationKind] = Registry("activation")
"""The activations by name: ``"relu"``, ``"gelu"``, ``"gelu_tanh"``, ``"swiglu"``, ``"geglu_tanh"``."""
ACTIVATIONS.add("relu", ActivationKind(_relu))
ACTIVATIONS.add("gelu", ActivationKind(_gelu))
ACTIVATIONS.add("gelu_tanh", ActivationKind(_gelu_tanh))
ACTIVATIONS.add("swiglu", ActivationKind(_silu, gated=True))
ACTIVATIONS.add("geglu_tanh", ActivationKind(_gelu_tanh, gated=True))


class FeedForward(nn.Module):
    """``W2 · dropout(act(W1 x))`` applied to every position of ``x [B, T, D]``.

    ``activation`` is ``"relu"`` (the paper), ``"gelu"``, ``"gelu_tanh"`` (GPT-2's
    approximation), ``"swiglu"`` (``W2 · (silu(W1 x) * W3 x)``, as in LLaMA) or ``"geglu_tanh"`` (the same
    with GPT-2's tanh GELU for the gate, as Gemma).
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
        kind = ACTIVATIONS.get(activation)
        self.activation = activation
        self._fn = kind.fn
        self._gated = gated = kind.gated
        self.linear1 = nn.Linear(dim, 2 * hidden_dim if gated else hidden_dim, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(hidden_dim, dim, bias=bias)
        # The hidden layer before the activation (gated: the gate; hook_pre_linear the other half) and after it.
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()
        if gated:
            self.hook_pre_linear = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        h = self.linear1(x)
        if self._gated:
            gate, up = h.chunk(2, dim=-1)
            h = self._fn(self.hook_pre(gate)) * self.hook_pre_linear(up)
        else:  # (relu works in place: a hook's tensor is kept as the hook saw it)
            h = self._fn(self.hook_pre(h).clone() if self.hook_pre.fns else h)
        return self.linear2(self.dropout(self.hook_post(h)))
