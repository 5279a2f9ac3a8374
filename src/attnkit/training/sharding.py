"""Sharded training (``trainer.strategy=fsdp``) and activation checkpointing.

``trainer.strategy=fsdp`` trains with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) through
Lightning's ``ModelParallelStrategy`` (a data-parallel mesh over every process, no tensor
parallelism): each process holds a shard of every parameter, of its gradient and of its optimiser
state, and gathers a block's full parameters only while that block runs. Lightning's ``FSDPStrategy``
(FSDP1) was not used: it refuses the CPU ("requires a GPU accelerator"), so it cannot be tested here,
and FSDP2 is the API PyTorch develops.

- **Shard units**: every transformer block of every stack (:class:`attnkit.nn.TransformerEncoder`,
  :class:`attnkit.nn.TransformerDecoder`) is its own unit; the rest of the model (embeddings, heads,
  final norms) is the root unit.
- **Mixed precision**: ``trainer.precision=bf16-mixed`` keeps float32 parameters and optimiser
  states and computes in bfloat16 (``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)``: gradients are reduced in float32); ``32-true`` computes in float32.
- **Checkpoints** are full, unsharded state dicts in the usual ``.ckpt`` file (Lightning's
  ``save_distributed_checkpoint=False``: the shards are gathered and rank 0 writes the file), so
  ``attnkit test``, ``generate``, ``export``, ``chat`` and ``--resume`` read them without the strategy,
  and a sharded run can be resumed as a DDP run (or the other way round). Gathering costs the full
  model's size in rank 0's CPU memory while a checkpoint is written.
- **Compiling** (``trainer.compile=true``): the runner compiles the whole model in place
  (``nn.Module.compile``) before Lightning's ``configure_model`` shards it. Tested on 2 CPU
  processes: the model's forward pass traced by ``torch.compile``, the same losses and weights as DDP.
  (Compiling each block after sharding, torchtitan's way, has not been measured against it on a GPU.)
- **Evaluation**: every forward pass is a collective, so every process must make as many. The data
  modules give every process as many evaluation batches (:class:`attnkit.data.base.EvalBatches`: padding
  batches, counted in no metric, where a split does not divide evenly); work whose number of forward
  passes differs between processes (decoding: each stops when its own batch is done) runs inside
  :func:`gathered_weights`, which gathers every unit's weights once for it.
- **CPU memory**: FSDP gathers each block's full weights and makes its full gradients anew in every
  step, then frees them. glibc's ``malloc`` raises its threshold for serving a request with its own
  memory map to the size of the largest one freed (up to 32 MiB), so from the first step on these
  buffers (a block's 4-16 MiB matrices) came from its heap, where the holes they left stayed resident:
  about 0.8 GiB per process more than the shards, gradients and Adam states of a 302M-parameter
  decoder (``benchmarks/memory.py``). A sharded run on the CPU therefore fixes that threshold at
  glibc's initial 128 KiB (:func:`fix_mmap_threshold`): a large buffer is returned to the system when
  it is freed. It also drops the gradients right after each optimiser step rather than before the
  next backward pass (Lightning's order), so that the next forward pass does not hold them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from lightning.pytorch.strategies import ModelParallelStrategy, Strategy
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from attnkit.config import ConfigError
from attnkit.nn import TransformerDecoder, TransformerEncoder
from attnkit.training.config import TrainerConfig

__all__ = [
    "FSDP",
    "FSDP_PRECISIONS",
    "ShardingPlan",
    "fix_mmap_threshold",
    "gathered_weights",
    "is_sharded",
    "set_activation_checkpointing",
    "shard_model",
    "sharding_plan",
    "strategy_for",
    "transformer_stacks",
]

log = logging.getLogger(__name__)

FSDP = "fsdp"
# trainer.precision -> the dtype FSDP computes in (None: the parameters' own, float32).
FSDP_PRECISIONS: dict[str, torch.dtype | None] = {"32-true": None, "bf16-mixed": torch.bfloat16}


@dataclass(frozen=True)
class ShardingPlan:
    """How :func:`shard_model` shards a model: the dtype blocks compute in (``None``: float32)."""

    param_dtype: torch.dtype | None = None


def transformer_stacks(model: nn.Module) -> list[TransformerEncoder | TransformerDecoder]:
    """The encoder and decoder stacks of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, TransformerEncoder | TransformerDecoder)]


def set_activation_checkpointing(model: nn.Module, enabled: bool = True) -> int:
    """Turn activation checkpointing of every block of ``model``'s stacks on (or off); returns the
    number of blocks concerned. Raises :class:`ConfigError` when ``model`` has no transformer stack."""
    stacks = transformer_stacks(model)
    if enabled and not stacks:
        raise ConfigError(
            f"trainer.activation_checkpointing=true recomputes transformer blocks, but the model "
            f"({type(model).__name__}) has no TransformerEncoder/TransformerDecoder stack: set it to false"
        )
    for stack in stacks:
        stack.activation_checkpointing = enabled
    return sum(len(stack.layers) for stack in stacks)


def _world_size(t: TrainerConfig) -> int:
    """The number of processes of a run with trainer section ``t`` (``devices`` x ``num_nodes``)."""
    devices = t.devices
    if devices == "auto":
        on_gpu = t.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        count = torch.cuda.device_count() if on_gpu else 1
    elif isinstance(devices, int):
        count = devices
    else:
        try:
            count = int(devices)
        except ValueError:
            raise ConfigError(
                f"trainer.strategy=fsdp needs trainer.devices as a number of processes per machine, got {devices!r}"
            ) from None
    return count * t.num_nodes


def sharding_plan(t: TrainerConfig) -> ShardingPlan | None:
    """The plan of a run with trainer section ``t``: ``None`` unless ``t.strategy`` is ``fsdp``.
    Raises :class:`ConfigError` for settings FSDP cannot run with."""
    if t.strategy != FSDP:
        return None
    if t.precision not in FSDP_PRECISIONS:
        raise ConfigError(
            f"trainer.strategy=fsdp supports trainer.precision {' or '.join(FSDP_PRECISIONS)}, got "
            f"{t.precision!r} (bf16-mixed keeps float32 weights and computes in bfloat16)"
        )
    world = _world_size(t)
    if world < 2:
        raise ConfigError(
            f"trainer.strategy=fsdp shards the model over several processes, but this run has {world} "
            f"(trainer.devices={t.devices!r}, trainer.num_nodes={t.num_nodes}): set trainer.devices=2 or more "
            "(on a CPU: trainer.accelerator=cpu trainer.devices=2), or train in one process with trainer.strategy=auto"
        )
    return ShardingPlan(param_dtype=FSDP_PRECISIONS[t.precision])


def strategy_for(t: TrainerConfig) -> str | Strategy:
    """What Lightning's Trainer gets as its ``strategy``: ``t.strategy`` itself, or for ``fsdp`` a
    ``ModelParallelStrategy`` whose data-parallel mesh spans every process (full checkpoints)."""
    if sharding_plan(t) is None:
        return t.strategy
    return ModelParallelStrategy(
        data_parallel_size=_world_size(t), tensor_parallel_size=1, save_distributed_checkpoint=False
    )


def is_sharded(model: nn.Module) -> bool:
    """Whether :func:`shard_model` (or ``fully_shard``) has sharded ``model``."""
    return isinstance(model, FSDPModule)


def shard_model(model: nn.Module, mesh: DeviceMesh, plan: ShardingPlan) -> None:
    """Shard ``model`` in place over the 1-D ``mesh``: each block of its transformer stacks, then the
    rest of the model as the root unit."""
    policy = MixedPrecisionPolicy(param_dtype=plan.param_dtype, reduce_dtype=torch.float32)
    for stack in transformer_stacks(model):
        for block in stack.layers:
            fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


@contextmanager
def gathered_weights(model: nn.Module) -> Iterator[None]:
    """Within the block, every FSDP unit of a sharded ``model`` holds its full weights: gathered once on
    entry (one all-gather per unit, in the same order on every process) and kept through any number of
    forward passes, which then communicate nothing; resharded on exit. For work whose number of forward
    passes may differ between processes, such as decoding (each process stops when its own batch is
    done), which would otherwise leave a process waiting forever in an all-gather the others never
    join. Costs the full model's weights in memory while it lasts. For a model that has made a forward
    pass (FSDP initialises itself in the first); does nothing to a model that is not sharded."""
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            # shard_model's (FSDP2's default): a block is resharded after its forward pass, the root is not.
            unit.set_reshard_after_forward(unit is not model, recurse=False)
            unit.reshard()


# mallopt's parameter number of M_MMAP_THRESHOLD (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3


def fix_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """Fix glibc ``malloc``'s threshold above which a request gets its own memory map (returned to the
    system when freed) at ``threshold`` bytes, glibc's initial value by default: it no longer grows to
    the size of the largest block freed (see the module's notes on CPU memory). Affects the whole
    process; returns whether it was set (``False`` where the C library is not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # not glibc: nothing to fix
        log.debug("fix_mmap_threshold: the C library (%s) is not glibc; left as it is", name)
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
