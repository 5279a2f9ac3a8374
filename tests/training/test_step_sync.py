"""A training step never makes the host wait for the device.

On a GPU the host queues a step's kernels and runs ahead; anything that reads a device value back (an
``.item()``, ``int(tensor)``, a boolean index, whose result's shape depends on the data) or makes a device
tensor from a Python number (a host-to-device copy) stalls it until every queued kernel has run, every step.
The first GPU run of ``attnkit train lm`` (benchmarks/gpu_suite.py, H200) ran at 0.76x a plain compiled loop
of the same model with such a step. This test records every operation ``training_step`` dispatches (a
:class:`~torch.utils._python_dispatch.TorchDispatchMode`, on the CPU) and fails on those that would
synchronise on CUDA."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnkit.tasks import TASKS
from attnkit.training.runner import build_module

LM = {"data": {"builtin_documents": 60}, "model": {"d_model": 32, "num_layers": 1, "num_heads": 2, "max_len": 32}}
LM["model"] |= {"dim_feedforward": 64}
LM["trainer"] = {"batch_size": 8}
# Ops that read a device value on the host (or whose output shape depends on device values), and a tensor
# made from a host value (torch.tensor(x, device=...): a blocking host-to-device copy on CUDA).
SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "unique_dim",
           "_unique2", "lift_fresh", "boolean index"}  # fmt: skip


class Record(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in ("index", "index_put", "index_put_") and any(  # a boolean index: its nonzero() reads it
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]
        ):
            name = "boolean index"
        self.ops[name] += 1
        return func(*args, **(kwargs or {}))


class OneProcess:
    def reduce(self, tensor: torch.Tensor, group: Any = None, reduce_op: Any = "mean") -> torch.Tensor:
        return tensor


@pytest.fixture(scope="module")
def lm() -> tuple[Any, Any]:
    cfg = TASKS["lm"].config(LM)
    datamodule = TASKS["lm"].build_datamodule(cfg)
    datamodule.setup("fit")
    return build_module(TASKS["lm"], cfg, datamodule), next(iter(datamodule.train_dataloader()))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("logging_step", [False, True])
def test_lm_training_step_dispatches_nothing_that_syncs(lm: tuple[Any, Any], k: int, logging_step: bool) -> None:
    module, batch = lm
    module.trainer = SimpleNamespace(
        accumulate_grad_batches=k, world_size=1, strategy=OneProcess(), loggers=[object()] if logging_step else [],
        log_every_n_steps=1, global_step=0,
    )  # fmt: skip
    module.log = lambda *a, **kw: None  # Lightning's logging (on its steps only) is not the module's own work
    module.on_train_epoch_start()
    with Record() as record:
        loss = module.training_step(batch, 0)
    assert loss.requires_grad and record.ops["addmm"] + record.ops["mm"] > 0  # it did run the model
    assert not SYNCING & set(record.ops), {op: record.ops[op] for op in SYNCING & set(record.ops)}


def test_lm_step_counts_only_real_targets(lm: tuple[Any, Any]) -> None:
    """The step keeps every position (no boolean index) and leaves out the ignored ones by ``ignore_index``:
    its loss is the mean over the real targets, as the masked computation gives."""
    module, batch = lm
    inputs, targets = batch
    targets = targets.clone()
    targets[:, :5] = -100  # as padding
    loss, logits, flat = module.step((inputs, targets))
    keep = flat != -100
    expected = torch.nn.functional.cross_entropy(logits[keep].float(), flat[keep])
    assert torch.allclose(loss, expected, rtol=1e-6, atol=1e-6)
    _nll, count = module._batch_nll
    assert int(count) == int(keep.sum()) < flat.numel()
