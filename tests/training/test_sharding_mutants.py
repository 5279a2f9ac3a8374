"""``attnkit.training.sharding`` function by function, in process (milliseconds a test): what
``tests/training/test_fsdp.py``'s two-process runs check end to end but ``tools/mutation.py --module
sharding`` cannot see (mutmut sees only the functions this process calls). Where the effect needs
several processes or a GPU (the reduce dtype, the number of GPUs, Lightning's mesh), the call that
asks for it is checked: the arguments given to ``fully_shard``, ``ModelParallelStrategy`` or ``mallopt``."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

import attnkit.training.sharding as sharding
from attnkit.config import ConfigError
from attnkit.nn import StackSpec, TransformerEncoder
from attnkit.training.config import TrainerConfig
from attnkit.training.sharding import (
    ShardingPlan,
    fix_mmap_threshold,
    set_activation_checkpointing,
    shard_model,
    sharding_plan,
    strategy_for,
)


def _fsdp(**settings: Any) -> TrainerConfig:
    return TrainerConfig.model_validate({"strategy": "fsdp", "accelerator": "cpu", "devices": 2, **settings})


def _encoder(layers: int) -> TransformerEncoder:
    return TransformerEncoder(StackSpec(8, 2, 16, 0.0, cross_attention=False, num_layers=layers))


class Recorded:
    """A stand-in for a class: records the keyword arguments it was made with."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def _world(monkeypatch: pytest.MonkeyPatch, **settings: Any) -> Any:
    """The data-parallel size ``strategy_for`` asks Lightning's ModelParallelStrategy for."""
    monkeypatch.setattr(sharding, "ModelParallelStrategy", Recorded)
    strategy = strategy_for(_fsdp(**settings))
    assert isinstance(strategy, Recorded)
    return strategy.kwargs["data_parallel_size"]


def test_fsdp_asks_lightning_for_one_data_parallel_mesh_over_every_process_and_full_checkpoints(monkeypatch):
    monkeypatch.setattr(sharding, "ModelParallelStrategy", Recorded)
    strategy = strategy_for(_fsdp(devices=3, num_nodes=2))
    assert isinstance(strategy, Recorded)
    assert strategy.kwargs == {"data_parallel_size": 6, "tensor_parallel_size": 1, "save_distributed_checkpoint": False}
    for name in ("ddp", "auto"):
        assert strategy_for(_fsdp(strategy=name)) == name  # other strategies pass through as they are


@pytest.mark.parametrize(
    ("accelerator", "gpus", "world"),
    [("auto", 4, 8), ("gpu", 4, 8), ("cuda", 4, 8), ("cpu", 4, 2), ("auto", 0, 2)],
)
def test_devices_auto_counts_the_gpus_only_where_the_run_uses_them(monkeypatch, accelerator, gpus, world):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert _world(monkeypatch, devices="auto", accelerator=accelerator, num_nodes=2) == world


def test_the_world_is_devices_times_nodes(monkeypatch):
    assert _world(monkeypatch, devices=1, num_nodes=2) == 2  # one process per machine is still sharded
    assert _world(monkeypatch, devices="4", num_nodes=3) == 12


def test_one_process_is_refused_with_how_to_fix_it():
    with pytest.raises(ConfigError) as err:
        sharding_plan(_fsdp(devices=1))
    assert str(err.value).endswith(
        "(trainer.devices=1, trainer.num_nodes=1): set trainer.devices=2 or more (on a CPU: "
        "trainer.accelerator=cpu trainer.devices=2), or train in one process with trainer.strategy=auto"
    )


def test_the_plan_computes_in_the_precisions_dtype():
    assert sharding_plan(_fsdp(precision="bf16-mixed")) == ShardingPlan(param_dtype=torch.bfloat16)
    assert sharding_plan(_fsdp(precision="32-true")) == ShardingPlan(param_dtype=None)
    assert sharding_plan(_fsdp(strategy="ddp")) is None


def test_every_unit_is_sharded_over_the_mesh_given_and_reduces_in_float32(monkeypatch):
    calls = []
    real = sharding.fully_shard

    def spy(module: nn.Module, **kwargs: Any) -> Any:
        calls.append((module, kwargs))
        return real(module, **kwargs)

    monkeypatch.setattr(sharding, "fully_shard", spy)
    model = nn.Sequential(_encoder(2))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("data_parallel",))  # not fully_shard's default mesh
        shard_model(model, mesh, ShardingPlan(param_dtype=torch.bfloat16))
        assert [m for m, _ in calls] == [*model[0].layers, model]
        for _, kwargs in calls:
            assert kwargs["mesh"] is mesh
            policy = kwargs["mp_policy"]
            assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
        assert all(p.device_mesh.mesh_dim_names == ("data_parallel",) for p in model.parameters())
    finally:
        dist.destroy_process_group()


def test_activation_checkpointing_is_set_on_every_stack_and_counts_their_blocks():
    model = nn.ModuleList([_encoder(2), _encoder(3)])
    assert set_activation_checkpointing(model) == 5
    assert [s.activation_checkpointing for s in model] == [True, True]
    assert set_activation_checkpointing(model, enabled=False) == 5
    assert [s.activation_checkpointing for s in model] == [False, False]
    assert set_activation_checkpointing(nn.Linear(2, 2), enabled=False) == 0  # nothing to turn off: no error
    with pytest.raises(ConfigError) as err:
        set_activation_checkpointing(nn.Linear(2, 2))
    assert str(err.value) == (
        "trainer.activation_checkpointing=true recomputes transformer blocks, but the model (Linear) has no "
        "TransformerEncoder/TransformerDecoder stack: set it to false"
    )


class FakeLibc:
    """A C library: glibc (``gnu_get_libc_version`` and ``mallopt``) or another one."""

    def __init__(self, name: str | None, glibc: bool = True, mallopt: bool = True, result: int = 1) -> None:
        self.name, self.calls, self.result = name, [], result
        if glibc:
            self.gnu_get_libc_version = lambda: b"2.36"
        if mallopt:
            self.mallopt = lambda param, value: self.calls.append((param, value)) or self.result


def _with_libc(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> list[FakeLibc]:
    made: list[FakeLibc] = []

    def cdll(name: str | None) -> FakeLibc:
        made.append(FakeLibc(name, **kwargs))
        return made[-1]

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    return made


def test_fix_mmap_threshold_sets_glibcs_mmap_threshold(monkeypatch):
    libc = _with_libc(monkeypatch)
    assert fix_mmap_threshold() is True
    assert fix_mmap_threshold(1 << 20) is True
    assert [lib.name for lib in libc] == [ctypes.util.find_library("c")] * 2 and libc[0].name
    assert libc[0].calls == [(-3, 128 * 1024)]  # M_MMAP_THRESHOLD (glibc's malloc.h), glibc's initial value
    assert libc[1].calls == [(-3, 1 << 20)]
    _with_libc(monkeypatch, result=0)
    assert fix_mmap_threshold() is False  # mallopt refused it


@pytest.mark.parametrize(("glibc", "mallopt"), [(False, True), (True, False), (False, False)])
def test_fix_mmap_threshold_leaves_other_c_libraries_alone(monkeypatch, caplog, glibc, mallopt):
    libc = _with_libc(monkeypatch, glibc=glibc, mallopt=mallopt)
    with caplog.at_level(logging.DEBUG, logger="attnkit.training.sharding"):
        assert fix_mmap_threshold() is False
    assert libc[0].calls == []
    assert caplog.messages == [
        f"fix_mmap_threshold: the C library ({ctypes.util.find_library('c')}) is not glibc; left as it is"
    ]


def test_fix_mmap_threshold_without_a_c_library_to_load(monkeypatch):
    def missing(name: str | None) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert fix_mmap_threshold() is False
