"""attnkit.nn.linear_cross_entropy: the loss of a linear head chunk by chunk, against F.cross_entropy of the logits."""

from __future__ import annotations

import math
import operator
from typing import Any

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


# ----------------------------------------------------------------- every branch: dtypes, bias, chunks
def _as(dtype: torch.dtype, *tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().to(dtype).requires_grad_() for t in tensors]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 5, 36, 37, 38, None])
def test_float32_inputs_with_or_without_bias_equal_cross_entropy_of_the_logits(
    with_bias: bool, chunk_size: int | None
) -> None:
    """float32 hidden and weight take the fused matrix product into the chunk's buffer (``addmm`` with
    a bias, ``mm`` without): the loss, predictions and each gradient equal those of the full logits
    (computed in float64). Chunks of 1, of a size that leaves a last partial chunk (5, 36 of 37 rows),
    of exactly the rows, of more rows than there are, and the default."""
    hidden64, weight64, bias64, targets = _inputs(v=301, seed=3)
    hidden, weight, bias = _as(torch.float32, hidden64, weight64, bias64)
    b = bias if with_bias else None
    loss, predictions = linear_cross_entropy(hidden, weight, targets, b, chunk_size=chunk_size)
    assert loss.dtype == torch.float32
    h, w, bb = _as(torch.float64, hidden, weight, bias)
    logits = F.linear(h, w, bb if with_bias else None)
    expected = F.cross_entropy(logits, targets)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(predictions, logits.argmax(-1))
    inputs, reference = [hidden, weight, *([bias] if with_bias else [])], [h, w, *([bb] if with_bias else [])]
    got = torch.autograd.grad(3.0 * loss, inputs)
    want = torch.autograd.grad(3.0 * expected, reference)
    for g, r, name in zip(got, want, ("hidden", "weight", "bias")):
        assert g.dtype == torch.float32, name
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-6, msg=name)
    if with_bias:  # the bias really moves the loss: without it, another value
        without, _ = linear_cross_entropy(hidden, weight, targets, None, chunk_size=chunk_size)
        assert abs(without.item() - loss.item()) > 0.1


def test_bfloat16_inputs_with_a_bias_match_float32_cross_entropy_of_their_logits() -> None:
    hidden, weight, bias, targets = _inputs(n=64, d=32, v=300, seed=4)
    h16, w16, b16 = _as(torch.bfloat16, hidden, weight, bias)
    loss, predictions = linear_cross_entropy(h16, w16, targets, b16, chunk_size=24)
    logits = F.linear(h16, w16, b16).float()  # the logits in bfloat16, then float32
    expected = F.cross_entropy(logits, targets)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(predictions, logits.argmax(-1))
    without, _ = linear_cross_entropy(h16, w16, targets, None, chunk_size=24)
    assert abs(without.item() - loss.item()) > 0.1
    got = torch.autograd.grad(loss, (h16, w16, b16))
    want = torch.autograd.grad(expected, (h16, w16, b16))
    for g, w, name in zip(got, want, ("hidden", "weight", "bias")):
        assert g.dtype == torch.bfloat16, name
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=1e-3, msg=name)


def test_a_bias_alone_may_require_gradients_and_leading_dimensions_are_kept() -> None:
    """``hidden [B, T, D]`` and ``targets [B, T]``: predictions come back ``[B, T]``; with only the bias
    trained, only it gets a gradient (the same as of the full logits)."""
    hidden, weight, bias, targets = _inputs(n=36, v=50, seed=5)
    h, w = hidden.detach().float().view(4, 9, -1), weight.detach().float()
    (b,) = _as(torch.float32, bias)
    t = targets.view(4, 9)
    loss, predictions = linear_cross_entropy(h, w, t, b, chunk_size=7)
    logits = F.linear(h, w, b)
    assert predictions.shape == (4, 9) and torch.equal(predictions, logits.argmax(-1))
    expected = F.cross_entropy(logits.reshape(36, -1), targets)
    (got,) = torch.autograd.grad(loss, b)
    (want,) = torch.autograd.grad(expected, b)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_default_chunk_is_as_many_rows_as_fit_chunk_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``chunk_size`` the rows per chunk are ``CHUNK_BYTES // (4 V)`` (float32 logits), at
    least 1 (a vocabulary larger than the budget); the loss is the same whatever the chunking."""
    import attnkit.nn.losses as losses_module

    hidden, weight, bias, targets = _inputs(n=37, v=101, seed=6)
    h, w, b = (t.detach().float() for t in (hidden, weight, bias))
    expected = F.cross_entropy(F.linear(h.double(), w.double(), b.double()), targets).float()
    chunks: list[int] = []
    addmm = torch.addmm
    monkeypatch.setattr(torch, "addmm", lambda *a, **k: chunks.append(a[1].shape[0]) or addmm(*a, **k))
    for budget, rows in ((4 * 101 * 8, [8, 8, 8, 8, 5]), (4 * 101 * 8 + 403, [8, 8, 8, 8, 5]), (7, [1] * 37)):
        monkeypatch.setattr(losses_module, "CHUNK_BYTES", budget)
        chunks.clear()
        loss, _ = linear_cross_entropy(h, w, targets, b)
        assert chunks == rows, budget
        torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(losses_module, "CHUNK_BYTES", 128 << 20)
    chunks.clear()
    linear_cross_entropy(h, w, targets, b)
    assert chunks == [37]  # 128 MiB: all 37 rows at once


def test_a_bias_or_weight_of_the_wrong_shape_is_explained() -> None:
    hidden, weight, bias, targets = _inputs()
    with pytest.raises(ValueError, match=r"bias must be \[V\]=\[101\], got \(100,\)"):
        linear_cross_entropy(hidden, weight, targets, bias[:-1])
    with pytest.raises(ValueError, match=r"bias must be \[V\]"):
        linear_cross_entropy(hidden, weight, targets, bias.view(1, -1))
    with pytest.raises(ValueError, match=r"weight \[V, D\] must share D, got \(37, 16\) and \(101, 1, 16\)"):
        linear_cross_entropy(hidden, weight.view(101, 1, 16), targets)  # the same D, but not [V, D]


def test_one_counted_target_one_class_and_the_outputs_dtypes() -> None:
    """Edge cases: exactly one counted target (its loss, not a mean over more, and not NaN), a single
    class with an ignored row (the ignored row's stand-in class must exist), predictions as int64."""
    hidden, weight, bias, targets = _inputs(n=6, v=7, seed=7)
    h, w, b = _as(torch.float32, hidden, weight, bias)
    one = torch.full_like(targets, IGNORE_INDEX)
    one[3] = 5
    loss, predictions = linear_cross_entropy(h, w, one, b, chunk_size=4)
    expected = F.cross_entropy(F.linear(h, w, b), one)
    torch.testing.assert_close(loss, expected)
    assert predictions.dtype == torch.long
    for g, r in zip(torch.autograd.grad(loss, (h, w, b)), torch.autograd.grad(expected, (h, w, b))):
        torch.testing.assert_close(g, r)
    single = torch.tensor([0, IGNORE_INDEX, 0])
    loss, predictions = linear_cross_entropy(h[:3], w[:1], single, b[:1])
    assert loss.item() == 0.0 and predictions.tolist() == [0, 0, 0]


def test_float32_inputs_stay_float32_whatever_the_default_dtype() -> None:
    hidden, weight, bias, targets = _inputs(n=9, v=11, seed=8)
    h, w, b = _as(torch.float32, hidden, weight, bias)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        loss, predictions = linear_cross_entropy(h, w, targets, b, chunk_size=4)
    finally:
        torch.set_default_dtype(previous)
    assert loss.dtype == torch.float32 and predictions.dtype == torch.long
    torch.testing.assert_close(loss, F.cross_entropy(F.linear(h, w, b), targets))


def test_every_tensor_is_made_on_the_inputs_device() -> None:
    """On the meta device (shapes only): a tensor made on the default device instead (the CPU) would
    meet the inputs' device and fail, as it would on a GPU."""
    hidden, weight, bias, targets = (t.detach().to("meta") for t in _inputs(n=9, v=11, seed=9))
    h, w, b = (t.float().requires_grad_() for t in (hidden, weight, bias))
    loss, predictions = linear_cross_entropy(h, w, targets, b, chunk_size=4)
    assert loss.device.type == predictions.device.type == "meta"
    grads = torch.autograd.grad(loss, (h, w, b))
    assert [g.device.type for g in grads] == ["meta"] * 3 and [g.shape for g in grads] == [h.shape, w.shape, b.shape]


def test_under_torch_compile_the_loss_runs_eagerly_and_equals_the_eager_loss() -> None:
    """torch.compile traces the caller but not the loss's data-dependent chunk loop (``torch.compiler.disable``,
    applied at the first compiled call: the first call here is compiled): the graphs it captures hold the
    caller's own operations alone, and the result equals the eager one."""
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(gm)
        return gm.forward

    def step(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss, _ = linear_cross_entropy(hidden * 2, weight, targets, chunk_size=3)
        return loss + 1

    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(7, 4, generator=g), torch.randn(5, 4, generator=g)
    targets = torch.randint(0, 5, (7,), generator=g)
    compiled = torch.compile(step, backend=record)
    for _ in range(2):  # the first call compiles, the second reuses the graphs
        torch.testing.assert_close(compiled(hidden, weight, targets), step(hidden, weight, targets))
    traced = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert traced and set(traced) <= {operator.mul, operator.add}, traced  # `hidden * 2`, `loss + 1`: no loss inside
