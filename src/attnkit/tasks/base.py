"""What a task is: the contract (:mod:`attnkit.training.task`, re-exported here) and helpers tasks share."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnkit.nn import MultiHeadAttention
from attnkit.training.task import AttentionExample, ModelSpec, Task, TaskConfig

__all__ = ["AttentionExample", "ModelSpec", "Task", "TaskConfig", "attention_weights"]


@torch.no_grad()
def attention_weights(model: nn.Module, *args: Any, **kwargs: Any) -> list[Tensor]:
    """The attention weights ``[B, H, Tq, Tk]`` of ``model`` for one input, per attention layer.

    ``model.get_attention_maps(*args, **kwargs)`` when the model has it. Otherwise (a model that
    only ever runs the fused kernel, which keeps no weights) ``model(*args, **kwargs)`` runs once
    with every :class:`attnkit.nn.MultiHeadAttention` on its explicit path (``need_weights=True``,
    same outputs), and the weights of each call are returned in call order.
    """
    get_maps = getattr(model, "get_attention_maps", None)
    if callable(get_maps):
        return list(get_maps(*args, **kwargs))
    recorded: list[Tensor] = []

    def want_weights(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return a, {**kw, "need_weights": True}

    def keep(_m: nn.Module, _a: Any, output: tuple[Tensor, Tensor | None]) -> None:
        if output[1] is not None:
            recorded.append(output[1])

    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no attnkit MultiHeadAttention layer and no get_attention_maps()")
    handles = [m.register_forward_pre_hook(want_weights, with_kwargs=True) for m in layers]
    handles += [m.register_forward_hook(keep) for m in layers]
    try:
        model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return recorded
