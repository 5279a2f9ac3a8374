"""The gradient accumulation of :class:`attnkit.training.TaskModule` (``training_step``'s summed loss,
``on_before_optimizer_step``'s scale) hook by hook, in process, against a stand-in trainer: what
``tests/training/test_accumulate.py``'s whole runs (one process, fewer than 2^24 targets a step, k = 4)
cannot tell. Milliseconds a test: ``tools/mutation.py --module accumulation`` runs them per mutant.

Lightning's part is played by the test as Lightning plays it: each returned loss is divided by k before
its backward pass, and a multi-process strategy's ``reduce`` is :class:`TwoProcesses` (``DDPStrategy``'s
rules: ``"mean"`` by default, any other name is ``torch.distributed.ReduceOp``'s, upper-cased)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.distributed import ReduceOp

from attnkit.nn.losses import IGNORE_INDEX
from attnkit.tasks import TASKS
from attnkit.training.runner import build_module

LM = {"data": {"builtin_documents": 60}, "model": {"d_model": 32, "num_layers": 1, "num_heads": 2, "max_len": 32}}
LM["model"] |= {"dim_feedforward": 64}
LM["trainer"] = {"batch_size": 8}


class OneProcess:
    """Lightning's single-device strategy: ``reduce`` returns the tensor itself, whatever the op."""

    def reduce(self, tensor: torch.Tensor, group: Any = None, reduce_op: Any = "mean") -> torch.Tensor:
        return tensor


class TwoProcesses:
    """``DDPStrategy.reduce`` over two processes, the other one having counted ``other`` targets (added
    in the tensor's own dtype and on its device, as ``all_reduce`` does)."""

    def __init__(self, other: int) -> None:
        self.other = other

    def reduce(self, tensor: torch.Tensor, group: Any = None, reduce_op: Any = "mean") -> torch.Tensor:
        both = torch.stack([tensor, torch.tensor(self.other, dtype=tensor.dtype, device=tensor.device)])
        if reduce_op in ("mean", "avg"):
            return both.mean(0)
        op = getattr(ReduceOp, reduce_op.upper())  # lightning's _sync_ddp: an unknown name fails here
        if op != ReduceOp.SUM:
            raise AssertionError(f"a count reduced with {reduce_op!r}")
        return both.sum(0)


@pytest.fixture(scope="module")
def lm() -> tuple[Any, list[Any]]:
    cfg = TASKS["lm"].config(LM)
    datamodule = TASKS["lm"].build_datamodule(cfg)
    datamodule.setup("fit")
    loader = iter(datamodule.train_dataloader())
    return (lambda: build_module(TASKS["lm"], cfg, datamodule).eval()), [next(loader) for _ in range(2)]


def _attach(module: Any, k: int, strategy: Any, world_size: int = 1) -> None:
    module.trainer = SimpleNamespace(
        accumulate_grad_batches=k, world_size=world_size, strategy=strategy, loggers=[], log_every_n_steps=1,
        global_step=0,
    )  # fmt: skip


def _grads(module: Any) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    assert grads
    return grads


def _targets(batch: Any) -> int:
    return int((batch[1] != IGNORE_INDEX).sum())


def _one_target(batch: Any) -> Any:
    inputs, targets = batch
    kept = targets.clone().fill_(IGNORE_INDEX)
    kept[0, -1] = targets[0, -1]
    assert _targets((inputs, kept)) == 1
    return inputs, kept


def test_two_accumulated_batches_of_different_target_counts_weigh_every_target_alike(lm):
    """k = 2 (the smallest accumulation) is accumulated: the step's gradient is that of the mean over the
    targets of both batches, not the mean of the two batches' means."""
    build, batches = lm
    assert _targets(batches[0]) != _targets(batches[1])
    module = build()
    losses = [module.step(b)[0] * _targets(b) for b in batches]
    (sum(losses) / sum(_targets(b) for b in batches)).backward()
    expected = _grads(module)
    _attach(module, 2, OneProcess())
    for i, batch in enumerate(batches):
        (module.training_step(batch, i) / 2).backward()
    module.on_before_optimizer_step(None)
    actual = _grads(module)
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, rtol=0, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_without_accumulation_the_loss_and_gradients_are_the_steps_own(lm):
    build, batches = lm
    module = build()
    _attach(module, 1, OneProcess())
    loss = module.training_step(batches[0], 0)
    assert torch.equal(loss, module.step(batches[0])[0])  # the batch's mean loss, not its sum
    loss.backward()
    before = _grads(module)
    module.step(batches[0])[0].backward()
    module.on_before_optimizer_step(None)
    after = _grads(module)
    assert all(torch.equal(after[n], g) for n, g in before.items())  # left as they are


def test_a_step_counting_one_target_gets_that_targets_gradient(lm):
    build, batches = lm
    batch = _one_target(batches[0])
    module = build()
    module.step(batch)[0].backward()
    expected = _grads(module)
    _attach(module, 2, OneProcess())
    (module.training_step(batch, 0) / 2).backward()
    module.on_before_optimizer_step(None)
    actual = _grads(module)
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, rtol=1e-6, atol=0, msg=lambda m, n=name: f"{n}: {m}")


def test_the_target_count_is_summed_over_the_processes_exactly_on_the_modules_device(lm):
    """Two processes (gradients averaged over them by DDP, so multiplied by 2 here), this one with 1 target
    and the other with 2^24: the total is counted exactly (float32 would round 2^24 + 1), with ``sum``, on
    the module's device whatever the default device (a NCCL count must be on the process's GPU: the
    ``meta`` default device here makes a count made without the module's device fail)."""
    build, batches = lm
    other, k = 2**24, 4  # k a power of 2: the float32 loss divided by it exactly
    batch = _one_target(batches[0])
    module = build().double()
    module.step(batch)[0].backward()
    summed = _grads(module)  # the gradient of this process's summed loss (of its one target)
    _attach(module, k, TwoProcesses(other), world_size=2)
    (module.training_step(batch, 0) / k).backward()
    with torch.device("meta"):
        module.on_before_optimizer_step(None)
    actual = _grads(module)
    for name, grad in summed.items():
        expected = grad * 2 / (1 + other)
        torch.testing.assert_close(actual[name], expected, rtol=1e-12, atol=0, msg=lambda m, n=name: f"{n}: {m}")
