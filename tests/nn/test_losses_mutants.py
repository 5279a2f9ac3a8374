"""linear_cross_entropy: the work it does and the memory it keeps, and the settings it must not depend on.

The tests that kill the mutants of ``nn/losses.py`` that ``test_losses.py`` lets live (see the mutation
table of docs/development.md): gradients made or kept for inputs that do not want one (counted in matrix
products with ``FlopCounterMode`` and in bytes kept for backward with ``saved_tensors_hooks``), float32
accumulators under another default dtype, tensors made on the default device instead of the inputs', and
the matrix-product branch taken under autocast for inputs of two dtypes.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnkit.nn import IGNORE_INDEX, linear_cross_entropy

N, D, V = 37, 16, 101


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden, weight, bias = (torch.randn(*shape, generator=g, dtype=torch.float32) for shape in ((N, D), (V, D), (V,)))
    targets = torch.randint(0, V, (N,), generator=g)
    targets[::5] = IGNORE_INDEX
    return hidden, weight, bias, targets


def _measured(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor) -> tuple[int, int]:
    """(floating-point operations of the matrix products, bytes kept for the backward pass) of one call."""
    kept: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(t.numel() * t.element_size())
        return t

    with FlopCounterMode(display=False) as flops, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        linear_cross_entropy(hidden, weight, targets, bias, chunk_size=8)
    return flops.get_total_flops(), sum(kept)


@pytest.mark.parametrize("wanted", [w for n in range(4) for w in itertools.combinations(("h", "w", "b"), n)])
def test_only_the_gradients_wanted_are_computed_and_kept(wanted: tuple[str, ...]) -> None:
    """One ``[N, V] x [V, D]`` product for the logits, one more for each of ``hidden``'s and ``weight``'s
    gradients when it is wanted, none otherwise (a frozen head, LoRA, evaluation); and for the backward
    pass exactly the wanted gradients are kept: ``hidden``'s in its dtype, ``weight``'s and ``bias``'s in
    float32, nothing for the others. Under ``no_grad`` only the logits are computed, whatever requires grad."""
    hidden, weight, bias, targets = _inputs()
    h, w, b = (t.requires_grad_(name in wanted) for t, name in zip((hidden, weight, bias), "hwb"))
    product = 2 * N * V * D
    flops, kept = _measured(h, w, b, targets)
    assert flops == product * (1 + ("h" in wanted) + ("w" in wanted))
    assert kept == 4 * (N * D * ("h" in wanted) + V * D * ("w" in wanted) + V * ("b" in wanted))
    with torch.no_grad():
        assert _measured(h, w, b, targets) == (product, 0)


def test_the_loss_and_gradients_do_not_depend_on_the_default_dtype() -> None:
    """float32 inputs under ``torch.set_default_dtype(torch.float64)``: the loss and every gradient are
    accumulated in float32 as under the default float32, bit for bit (a float64 accumulator would round
    otherwise over the 37 chunks of one row)."""

    def run() -> list[torch.Tensor]:
        hidden, weight, bias, targets = (t.requires_grad_(t.is_floating_point()) for t in _inputs(seed=1))
        loss, _ = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=1)
        return [loss.detach(), *torch.autograd.grad(loss, (hidden, weight, bias))]

    want = run()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = run()
    finally:
        torch.set_default_dtype(previous)
    for g, w, name in zip(got, want, ("loss", "hidden", "weight", "bias")):
        assert g.dtype == torch.float32 and torch.equal(g, w), name


def test_every_tensor_is_made_on_the_inputs_device_whatever_the_default_device() -> None:
    """CPU inputs under another default device (``torch.set_default_device``, here the meta device as a
    stand-in for ``cuda``): the loss and gradients are made on the CPU, with the values they have there."""
    hidden, weight, bias, targets = (t.requires_grad_(t.is_floating_point()) for t in _inputs(seed=2))
    want, _ = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=8)
    want_grads = torch.autograd.grad(want, (hidden, weight, bias))
    with torch.device("meta"):
        loss, predictions = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=8)
        grads = torch.autograd.grad(loss, (hidden, weight, bias))
    assert loss.device.type == predictions.device.type == "cpu" and torch.equal(loss, want)
    for g, w in zip(grads, want_grads):
        assert g.device.type == "cpu" and torch.equal(g, w)


def test_inputs_of_two_dtypes_under_autocast_take_the_autocast_product() -> None:
    """Mixed precision (Lightning's ``bf16-mixed``): the hidden states come out of autocast in bfloat16,
    the head's weight and bias are float32 parameters. The logits are autocast's bfloat16 ``F.linear``,
    then float32, as for ``F.cross_entropy(F.linear(h, w, b).float(), t)`` under the same autocast."""
    hidden, weight, bias, targets = _inputs(seed=3)
    w, b = weight.requires_grad_(), bias.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = F.linear(hidden.requires_grad_(), torch.eye(D))  # bfloat16, as a model's last layer gives it
        assert h.dtype == torch.bfloat16 and w.dtype == torch.float32
        loss, predictions = linear_cross_entropy(h, w, targets, b, chunk_size=8)
        logits = F.linear(h, w, b).float()
        expected = F.cross_entropy(logits, targets)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(predictions, logits.argmax(-1))
    got = torch.autograd.grad(loss, (hidden, w, b), retain_graph=True)  # h's graph is shared with expected's
    want = torch.autograd.grad(expected, (hidden, w, b))
    for g, r, name in zip(got, want, ("hidden", "weight", "bias")):
        assert g.dtype == r.dtype == torch.float32, name
        torch.testing.assert_close(g, r, rtol=2e-2, atol=2e-3, msg=name)
