"""attnkit.nn.linear_cross_entropy: the loss of a linear head chunk by chunk, against F.cross_entropy of the logits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.nn import IGNORE_INDEX, linear_cross_entropy


def _inputs(n: int = 37, d: int = 16, v: int = 101, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_()
    weight = torch.randn(v, d, generator=g, dtype=torch.float64).requires_grad_()
    bias = torch.randn(v, generator=g, dtype=torch.float64).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    targets[::5] = IGNORE_INDEX
    return hidden, weight, bias, targets


@pytest.mark.parametrize("chunk_size", [1, 6, 37, 100, None])
def test_loss_predictions_and_gradients_equal_cross_entropy_of_the_logits(chunk_size: int | None) -> None:
    hidden, weight, bias, targets = _inputs()
    loss, predictions = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=chunk_size)
    logits = F.linear(hidden, weight, bias)
    expected = F.cross_entropy(logits, targets)
    torch.testing.assert_close(loss, expected.float(), rtol=1e-6, atol=1e-6)  # the loss is summed in float32
    assert torch.equal(predictions, logits.argmax(-1)) and not predictions.requires_grad
    # an upstream gradient other than 1 (e.g. a scaled loss) scales every gradient
    got = torch.autograd.grad(2.5 * loss, (hidden, weight, bias))
    want = torch.autograd.grad(2.5 * expected, (hidden, weight, bias))
    for g, w, name in zip(got, want, ("hidden", "weight", "bias")):
        assert g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=name)


def test_ignored_rows_get_exactly_zero_gradient_and_their_targets_are_never_read() -> None:
    hidden, weight, bias, targets = _inputs()
    ignored = targets == IGNORE_INDEX
    loss, _ = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=4)
    (grad,) = torch.autograd.grad(loss, hidden)
    assert ignored.any() and bool((grad[ignored] == 0).all())
    assert bool((grad[~ignored].abs().sum(-1) > 0).all())
    # another ignore_index: the -100 rows now count... and an out-of-range counted target is an error
    with pytest.raises(RuntimeError):
        linear_cross_entropy(hidden, weight, targets, bias, ignore_index=-1)


def test_only_the_inputs_that_require_gradients_get_them(monkeypatch: pytest.MonkeyPatch) -> None:
    hidden, weight, bias, targets = _inputs()
    frozen = weight.detach()  # a frozen head (LoRA)
    loss, _ = linear_cross_entropy(hidden, frozen, targets, None)
    (grad,) = torch.autograd.grad(loss, hidden)
    (want,) = torch.autograd.grad(F.cross_entropy(F.linear(hidden, frozen), targets), hidden)
    torch.testing.assert_close(grad, want)
    # under no_grad no gradient is made at all (the one_hot subtraction is the gradient's first step)
    scatters = []
    scatter_add_ = torch.Tensor.scatter_add_
    monkeypatch.setattr(torch.Tensor, "scatter_add_", lambda t, *a: scatters.append(1) or scatter_add_(t, *a))
    with torch.no_grad():
        quiet, _ = linear_cross_entropy(hidden, weight, targets, bias, chunk_size=8)
    assert not quiet.requires_grad and scatters == []
    linear_cross_entropy(hidden, weight, targets, bias, chunk_size=8)
    assert len(scatters) == 5  # one per chunk of 37 rows when gradients are wanted
    torch.testing.assert_close(quiet, F.cross_entropy(F.linear(hidden, weight, bias), targets).float().detach())


def test_half_precision_inputs_match_float32_cross_entropy_of_their_logits() -> None:
    hidden, weight, _, targets = _inputs(n=64, d=32, v=300)
    h16, w16 = hidden.detach().bfloat16().requires_grad_(), weight.detach().bfloat16().requires_grad_()
    loss, _ = linear_cross_entropy(h16, w16, targets)
    expected = F.cross_entropy(F.linear(h16, w16).float(), targets)  # what the sft task did before
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    got = torch.autograd.grad(loss, (h16, w16))
    want = torch.autograd.grad(expected, (h16, w16))
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=1e-3)


def test_no_counted_target_gives_nan_as_cross_entropy_and_bad_shapes_are_explained() -> None:
    hidden, weight, _, targets = _inputs()
    loss, _ = linear_cross_entropy(hidden, weight, torch.full_like(targets, IGNORE_INDEX))
    assert math.isnan(loss.item()) and math.isnan(F.cross_entropy(hidden @ weight.T, targets * 0 - 100).item())
    with pytest.raises(ValueError, match="share D"):
        linear_cross_entropy(hidden, weight[:, :3], targets)
    with pytest.raises(ValueError, match="leading shape"):
        linear_cross_entropy(hidden, weight, targets[:-1])
    with pytest.raises(ValueError, match="chunk_size"):
        linear_cross_entropy(hidden, weight, targets, chunk_size=0)


@pytest.mark.parametrize("tied", [True, False])
def test_a_language_model_with_targets_gives_the_loss_and_gradients_of_its_logits(tied: bool) -> None:
    """LanguageModel.forward(..., targets=): the sft task's loss. Every parameter's gradient (the tied
    embedding's too: full fine-tuning) equals that of cross_entropy(forward(ids)) over the counted targets."""
    torch.manual_seed(0)
    config = LanguageModelConfig(vocab_size=50, d_model=16, num_heads=2, num_layers=2, dim_feedforward=32,
                                 max_len=32, tie_weights=tied)  # fmt: skip
    model = LanguageModel(config).eval()  # no dropout: two forward passes see the same function
    ids = torch.randint(0, 50, (3, 12))
    targets = ids.roll(-1, 1)
    targets[:, :4] = IGNORE_INDEX
    targets[2, 8:] = IGNORE_INDEX
    loss, predictions = model(ids, targets=targets)
    logits = model(ids)
    counted = targets != IGNORE_INDEX
    expected = F.cross_entropy(logits[counted], targets[counted])
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(predictions, logits[counted].argmax(-1))
    params = [p for p in model.parameters()]
    got = torch.autograd.grad(loss, params)
    want = torch.autograd.grad(expected, params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="targets must be"):
        model(ids, targets=targets[:, 1:])
