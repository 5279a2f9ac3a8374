"""Cross-entropy of a linear head, chunk by chunk, without the ``[N, V]`` logits.

A language model's loss is ``cross_entropy(h Wᵀ + b, targets)``. Written that way, the logits ``[N, V]``
(``N`` tokens, ``V`` the vocabulary) are made in full, then their log-softmax, then in backward a gradient
of the same size: for 2,048 tokens and a 49,152-token vocabulary, four buffers of 400 MB each, allocated,
filled and freed in every step (on the CPU each such buffer is a fresh memory map, and writing it first
costs a page fault per 4 KiB). :func:`linear_cross_entropy` computes the same loss and gradients one chunk
of tokens at a time: each chunk's logits, their log-sum-exp and, when gradients are wanted, the gradient
of the loss with respect to the chunk's logits (``softmax - one_hot``) at once, turned right away into
the gradients of ``h`` (``g W``), ``W`` (``gᵀ h``) and ``b``. Only those are kept for the backward pass,
so memory holds one chunk's logits instead of all of them (the fused linear cross-entropy of Liger-Kernel
and torchtune's chunked loss, here in plain PyTorch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["IGNORE_INDEX", "linear_cross_entropy"]

IGNORE_INDEX = -100  # targets a loss does not count (F.cross_entropy's default ignore_index)

# The size of one chunk's logits: 128 MiB of float32 (682 tokens of a 49,152-token vocabulary), one buffer
# reused by every chunk. Smaller chunks make thinner matrix products, which run slower on a CPU.
CHUNK_BYTES = 128 << 20


P = ParamSpec("P")
R = TypeVar("R")


def _eager_when_compiled(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, run eagerly when ``torch.compile`` traces its caller (``torch.compiler.disable(fn)``, applied at
    the first such call): ``torch.compiler.disable`` imports torch's compiler (``torch._dynamo``, seconds of
    start-up), which ``import attnkit.nn`` must not pay for; a program that compiles has imported it already."""
    disabled: list[Callable[P, R]] = []

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if not torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        if not disabled:
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    return call


@_eager_when_compiled  # eager under torch.compile: a data-dependent loop
def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    bias: Tensor | None = None,
    *,
    ignore_index: int = IGNORE_INDEX,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``(loss, predictions)``: the mean cross-entropy of the logits ``hidden @ weight.T + bias`` against
    ``targets``, over the targets that are not ``ignore_index`` (``F.cross_entropy``'s default
    reduction), and each row's most likely class (``argmax`` of its logits, ``[N]``, no gradient).

    Args:
        hidden: ``[N, D]`` (or ``[..., D]``, flattened): the head's inputs.
        weight: ``[V, D]``: the head's weight (an ``nn.Linear(D, V)``'s).
        targets: ``[N]`` (or the leading shape of ``hidden``): class indices, ``ignore_index`` = not counted.
        bias: ``[V]`` or ``None``.
        chunk_size: rows per chunk (default: as many as make 128 MiB of float32 logits).

    The logits are computed in ``hidden``'s dtype and taken to float32, as ``F.cross_entropy(logits.float(),
    targets)`` would; loss and gradients equal that (within float32 rounding). Gradients of ``hidden``,
    ``weight`` and ``bias`` are computed in the forward pass, only for those that require them and only
    when gradients are enabled; the backward pass scales them by the loss's incoming gradient. With no
    counted target the loss is NaN, as ``F.cross_entropy``'s mean over nothing.
    """
    if hidden.shape[-1] != weight.shape[-1] or weight.dim() != 2:
        raise ValueError(
            f"hidden [..., D] and weight [V, D] must share D, got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"targets {tuple(targets.shape)} must be hidden's leading shape {tuple(hidden.shape[:-1])}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must be [V]=[{weight.shape[0]}], got {tuple(bias.shape)}")
    rows = max(1, CHUNK_BYTES // (4 * weight.shape[0])) if chunk_size is None else chunk_size
    if rows < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    loss, predictions = _LinearCrossEntropy.apply(  # type: ignore[no-untyped-call]  # Function.apply is untyped
        hidden.reshape(-1, hidden.shape[-1]),
        weight,
        bias,
        targets.reshape(-1),
        ignore_index,
        rows,
        torch.is_grad_enabled(),
    )
    return loss, predictions.view(targets.shape)


class _LinearCrossEntropy(torch.autograd.Function):
    """The loss and its gradients, chunk by chunk (see :func:`linear_cross_entropy`)."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        ignore_index: int,
        rows: int,
        grad_enabled: bool,
    ) -> tuple[Tensor, Tensor]:
        # needs_input_grad follows requires_grad alone: no gradients when the caller had them disabled.
        wants = ctx.needs_input_grad[:3] if grad_enabled else (False, False, False)
        counted = targets != ignore_index
        count = counted.sum()
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        predictions = torch.empty(targets.shape, dtype=torch.long, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if wants[0] else None  # every row is written below
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if wants[1] else None
        grad_bias = torch.zeros(weight.shape[:1], dtype=torch.float32, device=weight.device) if wants[2] else None
        # Each row's gradient is (softmax - one_hot) / count; rows not counted get none. One float32 buffer
        # holds a chunk's logits, then (in place) their exponentials, then that gradient.
        weights = (counted.to(torch.float32) / count.clamp(min=1).to(torch.float32)).unsqueeze(-1)
        buffer = torch.empty(min(rows, hidden.shape[0]), weight.shape[0], dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], rows):
            h, t, keep = hidden[start : start + rows], targets[start : start + rows], counted[start : start + rows]
            logits = buffer[: h.shape[0]]
            if h.dtype == torch.float32 and weight.dtype == torch.float32:
                torch.mm(h, weight.t(), out=logits) if bias is None else torch.addmm(bias, h, weight.t(), out=logits)
            else:  # the logits in the inputs' dtype, then float32 (as F.cross_entropy(logits.float()))
                logits.copy_(F.linear(h, weight, bias))
            safe = t.masked_fill(~keep, 0).unsqueeze(-1)  # ignored rows: any class, their terms are dropped
            picked = logits.gather(-1, safe).squeeze(-1)
            top, predicted = logits.max(-1)
            predictions[start : start + rows] = predicted
            sums = logits.sub_(top.unsqueeze(-1)).exp_().sum(-1)
            total += ((sums.log() + top - picked) * keep).sum()  # log-sum-exp minus the target's logit
            if any(wants):
                w = weights[start : start + rows]
                grad = logits.mul_(w / sums.unsqueeze(-1))  # softmax, weighted
                grad.scatter_add_(-1, safe, -w)
                if grad_hidden is not None:
                    grad_hidden[start : start + rows] = (grad.to(weight.dtype) @ weight).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += grad.t() @ h.float()
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
        ctx.save_for_backward(*(g if g is not None else torch.empty(0) for g in (grad_hidden, grad_weight, grad_bias)))
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(predictions)
        loss = torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))
        return loss, predictions

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _grad_predictions: Tensor | None) -> tuple[Tensor | None, ...]:
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        wants = ctx.needs_input_grad
        weight_dtype, bias_dtype = ctx.dtypes
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype) if wants[0] else None,
            (grad_weight * grad_loss).to(weight_dtype) if wants[1] else None,
            (grad_bias * grad_loss).to(bias_dtype) if wants[2] else None,
            None,
            None,
            None,
            None,
        )
