"""``trainer.strategy=fsdp``: FSDP2 (``fully_shard``) through Lightning's ModelParallelStrategy, on 2 CPU
processes (gloo, 1 thread each).

The runs are probed (fsdp_probed.py): each process really held half of the model's parameters as
DTensor shards, one FSDP unit per transformer block. A sharded run trains as a DDP run of the same
seed (the same batches, losses and weights within float32 rounding); its checkpoints are ordinary
full ``.ckpt`` files that `attnkit test` and `attnkit generate` read in one process; stopped by SIGTERM
it resumes where it stopped, as a DDP run does (test_preemption.py's checks)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsdp_probed
import probed_cli
import pytest
import torch
import torch.distributed as dist
from cli_helpers import metrics_in_one_process
from test_preemption import DDP_ARGS, DDP_PER_EPOCH, DDP_STOP
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

import attnkit
from attnkit.config import ConfigError
from attnkit.models.seq2seq import greedy_decode
from attnkit.tasks import TASKS
from attnkit.training.checkpoint import load_checkpoint_file
from attnkit.training.runner import build_module
from attnkit.training.sharding import ShardingPlan, gathered_weights, shard_model
from cli_inprocess import cli_in_process

LM = [
    "data.builtin_documents=100", "model.d_model=32", "model.num_layers=2", "model.num_heads=2",
    "model.dim_feedforward=64", "model.max_len=32", "trainer.max_epochs=1", "trainer.batch_size=8",
    "trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu",
    "trainer.devices=2", "trainer.deterministic=true",
]  # fmt: skip
FSDP_ARGS = [*(a for a in DDP_ARGS if a != "trainer.strategy=ddp"), "trainer.strategy=fsdp", "model.num_layers=2"]


def _assert_sharded(records: list[dict], units: list[str]) -> None:
    """Two processes, each holding about half of every parameter as a DTensor shard."""
    assert [(r["world_size"], r["global_rank"]) for r in records] == [(2, 0), (2, 1)]
    assert len({r["pid"] for r in records}) == 2
    for r in records:
        assert r["dtensors"] and r["units"] == units, r
        assert r["local_numel"] < 0.6 * r["numel"]
        assert r["grads_after_step"] == 0  # dropped at the step, not held through the next forward pass
        assert r["mmap_threshold_fixed"] == [True]  # glibc here: freed buffers go back to the system
    assert sum(r["local_numel"] for r in records) == records[0]["numel"]  # disjoint shards of the whole


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run / "checkpoints" / "last.ckpt")["state_dict"]


def _assert_equal(actual: Any, saved: Any, where: str) -> None:
    """``actual`` equals ``saved`` exactly, nested dicts, lists and tensors included."""
    if isinstance(saved, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, saved), where
    elif isinstance(saved, dict):
        assert isinstance(actual, dict) and actual.keys() == saved.keys(), where
        for key in saved:
            _assert_equal(actual[key], saved[key], f"{where}[{key!r}]")
    elif isinstance(saved, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(saved), where
        for i, (a, b) in enumerate(zip(actual, saved)):
            _assert_equal(a, b, f"{where}[{i}]")
    else:
        assert actual == saved, f"{where}: {actual!r} != {saved!r}"


def _local_shards(actual: Any, saved: Any, rank: int) -> tuple[Any, Any]:
    """``actual`` with its DTensors as this process's shards, and ``saved`` (full tensors) cut to the
    same shards (FSDP2: dim 0 in ``torch.chunk``'s pieces)."""
    if isinstance(actual, DTensor):
        pieces = torch.chunk(saved, actual.device_mesh.size(), dim=0)
        return actual.to_local(), pieces[rank] if rank < len(pieces) else saved[:0]
    if isinstance(actual, dict) and isinstance(saved, dict) and actual.keys() == saved.keys():
        pairs = {k: _local_shards(actual[k], saved[k], rank) for k in actual}
        return {k: a for k, (a, _) in pairs.items()}, {k: b for k, (_, b) in pairs.items()}
    if isinstance(actual, list) and isinstance(saved, list) and len(actual) == len(saved):
        pairs_ = [_local_shards(a, b, rank) for a, b in zip(actual, saved)]
        return [a for a, _ in pairs_], [b for _, b in pairs_]
    return actual, saved


def _assert_resumed_sharded(probes: Path, rank: int, saved: dict, resumed: dict, full: dict, step: int) -> None:
    """test_preemption's ``_assert_resumed`` for a sharded run: the resumed process started at the saved
    step, inside the saved epoch, then ran the uninterrupted run's steps; its optimizer started from
    its shard of the saved (full) state, its schedule from the saved one."""
    per_epoch = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert resumed["steps"][0][:3] == [saved["epoch"], per_epoch, step]
    assert resumed["steps"] == full["steps"][step:]
    start = torch.load(probes / f"resumed-rank{rank}-start.pt", weights_only=True)
    _assert_equal(*_local_shards(start["optimizer"], saved["optimizer_states"][0], rank), "optimizer state")
    assert any(isinstance(s["exp_avg"], DTensor) for s in start["optimizer"]["state"].values())
    _assert_equal(start["scheduler"], saved["lr_schedulers"][0], "LR scheduler state")


def test_fsdp_trains_as_ddp_and_its_checkpoint_loads_without_the_strategy(tmp_path: Path):
    probes = tmp_path / "probes"
    out = ["train", "lm", "--output_dir", str(tmp_path)]
    fsdp = fsdp_probed.run(probes, "fsdp", *out, "name=fsdp", *LM, "trainer.strategy=fsdp", world=2)
    ddp = fsdp_probed.run(probes, "ddp", *out, "name=ddp", *LM, "trainer.strategy=ddp", world=2)
    _assert_sharded(fsdp, ["", "decoder.layers.0", "decoder.layers.1"])
    compiled = fsdp_probed.run(probes, "compiled", *out, "name=compiled", *LM, "trainer.strategy=fsdp",
                               "trainer.compile=true", world=2)  # fmt: skip
    _assert_sharded(compiled, ["", "decoder.layers.0", "decoder.layers.1"])
    assert not any(r["dtensors"] or r["units"] or r["mmap_threshold_fixed"] for r in ddp)
    assert all(r["grads_after_step"] > 0 for r in ddp)  # DDP: Lightning's order, dropped before the next backward
    assert [any(r["compiled"]) for r in fsdp + ddp + compiled] == [False] * 4 + [True] * 2
    for sharded, replicated, sharded_compiled in zip(fsdp, ddp, compiled):
        assert sharded["steps"] == replicated["steps"] == sharded_compiled["steps"] and sharded["steps"]
        torch.testing.assert_close(sharded["losses"], replicated["losses"], rtol=0, atol=1e-5)
        torch.testing.assert_close(sharded_compiled["losses"], replicated["losses"], rtol=0, atol=1e-5)

    run = tmp_path / "lm" / "fsdp"
    saved, reference = (
        load_checkpoint_file(tmp_path / "lm" / n / "checkpoints" / "last.ckpt") for n in ("fsdp", "ddp")
    )
    assert saved["state_dict"].keys() == reference["state_dict"].keys()  # full, unsharded, the plain model's keys
    for key, value in reference["state_dict"].items():
        assert type(saved["state_dict"][key]) is torch.Tensor  # not a DTensor
        torch.testing.assert_close(saved["state_dict"][key], value, rtol=0, atol=1e-4, msg=lambda m, k=key: f"{k}: {m}")
    compiled_weights = _weights(tmp_path / "lm" / "compiled")  # the keys of the plain model too (no _orig_mod.)
    assert compiled_weights.keys() == reference["state_dict"].keys()
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(compiled_weights[key], value, rtol=0, atol=1e-4, msg=lambda m, k=key: f"{k}: {m}")
    adam, adam_ddp = saved["optimizer_states"][0], reference["optimizer_states"][0]
    assert adam["state"].keys() == adam_ddp["state"].keys()  # the full optimizer state, keyed as DDP's
    for index, state in adam_ddp["state"].items():
        assert adam["state"][index]["exp_avg"].shape == state["exp_avg"].shape

    # Read in one process without the strategy: the same test metrics as the run's own.
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    one = metrics_in_one_process(run)
    assert one.keys() == {k for k in metrics if k.startswith("test/")} and one
    for key, value in one.items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key
    generated = cli_in_process("generate", str(run), "--temperature", "0", "--max-new-tokens", "12", "--prompt", "the")
    assert generated.returncode == 0, generated.stderr
    text = generated.stdout
    assert text.strip().startswith("the") and len(text.strip()) > len("the")


def test_fsdp_run_stopped_by_sigterm_resumes_where_it_stopped(tmp_path: Path):
    probes, cut = tmp_path / "probes", tmp_path / "reverse" / "cut"
    args = ["train", "reverse", "--output_dir", str(tmp_path)]
    proc = fsdp_probed.start(probes, "cut", *args, "name=cut", *FSDP_ARGS, pause_at=DDP_STOP)
    try:
        probed_cli.wait_for([probes / "cut-rank0-paused", probes / "cut-rank1-paused"], proc)
        proc.send_signal(signal.SIGTERM)
        out, err = probed_cli.finish(proc, probes, "cut", world=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    stopped = probed_cli.records(probes, "cut", world=2)
    assert proc.returncode == 143 and [r["code"] for r in stopped] == [143, 143], f"{stopped}\n{out}\n{err}"
    _assert_sharded(stopped, ["", "encoder.layers.0", "encoder.layers.1"])
    saved = load_checkpoint_file(cut / "checkpoints" / "last.ckpt")
    assert saved["global_step"] == DDP_STOP  # mid-epoch, as test_preemption's DDP run
    batches = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert (saved["epoch"], batches) == (DDP_STOP // DDP_PER_EPOCH, DDP_STOP % DDP_PER_EPOCH) and batches > 0
    adam = saved["optimizer_states"][0]["state"]
    assert adam and all(int(s["step"]) == DDP_STOP for s in adam.values())  # the full Adam state of that step

    resumed = fsdp_probed.run(probes, "resumed", "train", "reverse", "--resume", str(cut), world=2)
    full = fsdp_probed.run(probes, "full", *args, "name=full", *FSDP_ARGS, world=2)
    _assert_sharded(resumed, ["", "encoder.layers.0", "encoder.layers.1"])
    assert [len(r["steps"]) for r in full] == [3 * DDP_PER_EPOCH] * 2
    for rank in (0, 1):
        assert stopped[rank]["steps"] == full[rank]["steps"][:DDP_STOP]
        _assert_resumed_sharded(probes, rank, saved, resumed[rank], full[rank], DDP_STOP)
    resumed_weights, full_weights = _weights(cut), _weights(tmp_path / "reverse" / "full")
    differing = [k for k in full_weights if not torch.equal(resumed_weights[k], full_weights[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"


# ---------------------------------------------------------------------------------------------- in process


@pytest.fixture
def one_process_group():
    """A gloo process group of this process alone, and its 1-D mesh."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


@pytest.mark.filterwarnings("error:FSDP2-wrapped module")  # a root module returning a view (in-place ops unsafe)
@pytest.mark.parametrize(
    ("task", "overrides", "units"),
    [
        ("reverse", {"model": {"num_layers": 2}}, ["", "encoder.layers.0", "encoder.layers.1"]),
        (
            "translate",
            {"data": {"num_pairs": 200}, "model": {"d_model": 32, "num_layers": 1, "num_decoder_layers": 2}},
            ["", "encoder.layers.0", "decoder.layers.0", "decoder.layers.1"],
        ),
    ],
)
def test_every_block_is_its_own_unit_and_bf16_mixed_computes_in_bfloat16(one_process_group, task, overrides, units):
    cfg = TASKS[task].config(overrides)
    datamodule = TASKS[task].build_datamodule(cfg)
    datamodule.setup("fit")
    module = build_module(TASKS[task], cfg, datamodule)
    shard_model(module.model, one_process_group, ShardingPlan(param_dtype=torch.bfloat16))
    assert [n for n, m in module.model.named_modules() if isinstance(m, FSDPModule)] == units
    seen = []
    block = module.model.get_submodule(units[-1])
    block.register_forward_pre_hook(lambda mod, args: seen.append(next(mod.parameters()).dtype))
    module.model.train()
    loss, _, _ = module.step(next(iter(datamodule.train_dataloader())))
    loss.backward()
    assert seen == [torch.bfloat16]  # computed in bfloat16 ...
    assert {p.dtype for p in module.model.parameters()} == {torch.float32}  # ... kept in float32
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in module.model.parameters())


def test_gathered_weights_hold_every_unit_whole_through_any_number_of_forward_passes(one_process_group):
    cfg = TASKS["translate"].config(
        {"data": {"num_pairs": 200}, "model": {"d_model": 32, "num_layers": 1, "num_decoder_layers": 2}}
    )
    datamodule = TASKS["translate"].build_datamodule(cfg)
    datamodule.setup("fit")
    module = build_module(TASKS["translate"], cfg, datamodule)
    with gathered_weights(module.model):  # not sharded: nothing to gather
        pass
    model, reference = module.model, copy.deepcopy(module.model).eval()
    shard_model(model, one_process_group, ShardingPlan())
    model.eval()
    units = {n: m for n, m in model.named_modules() if isinstance(m, FSDPModule)}
    assert list(units) == ["", "encoder.layers.0", "decoder.layers.0", "decoder.layers.1"]

    def sharded() -> dict[str, bool]:  # per unit: its own parameters are DTensor shards
        return {n: all(isinstance(p, DTensor) for p in _own_parameters(m)) for n, m in units.items()}

    src, src_mask, tgt_in, *_ = next(iter(datamodule.test_dataloader()))
    model(src, tgt_in, src_mask)  # FSDP initialises itself in the root's first forward pass (as the test step's)
    model.reshard()
    assert all(sharded().values())
    with gathered_weights(model):
        assert not any(sharded().values())  # every unit whole ...
        hyps = greedy_decode(model, src, src_mask, max_len=6)  # ... through every decoding step
        assert not any(sharded().values())
    assert all(sharded().values())  # resharded on exit
    assert torch.equal(hyps.tokens, greedy_decode(reference, src, src_mask, max_len=6).tokens)  # the full weights
    model(src, tgt_in, src_mask)
    # FSDP's own rule again: a block is resharded after its forward pass, the root is kept whole
    assert sharded() == {"": False, "encoder.layers.0": True, "decoder.layers.0": True, "decoder.layers.1": True}


def _own_parameters(unit: torch.nn.Module) -> list[torch.nn.Parameter]:
    """``unit``'s parameters but those of the FSDP units inside it."""
    inner = {id(p) for m in unit.modules() if m is not unit and isinstance(m, FSDPModule) for p in m.parameters()}
    return [p for p in unit.parameters() if id(p) not in inner]


HEAP = """
import sys, torch
from attnkit.training.sharding import fix_mmap_threshold

def rss_mib():
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmRSS"))

if sys.argv[1] == "fix":
    assert fix_mmap_threshold()
big = torch.ones(2 << 20)  # 8 MiB with its own map, freed: glibc's threshold would grow to 8 MiB
del big
before = rss_mib()
blocks = [torch.ones(1 << 20) for _ in range(40)]  # 40 x 4 MiB (a block's matrices, unsharded)
del blocks[:-1]  # all but the last freed, as FSDP frees a block's full weights after using them
print(rss_mib() - before)
"""


@pytest.mark.parametrize(("fix", "most", "least"), [("fix", 0, 20), ("no", 120, 1e9)])
def test_fix_mmap_threshold_returns_freed_tensors_to_the_system(tmp_path: Path, fix: str, most: float, least: float):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", HEAP, fix], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    retained = float(out.stdout)  # MiB still resident of the 156 MiB freed
    assert most <= retained < least, retained  # without the fix, glibc's heap kept them


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"trainer.devices": 1}, r"shards the model over several processes, but this run has 1.*trainer.devices=2"),
        ({"trainer.devices": "auto"}, r"shards the model over several processes, but this run has 1"),
        ({"trainer.devices": "0,1"}, r"needs trainer.devices as a number of processes per machine, got '0,1'"),
        ({"trainer.devices": 2, "trainer.precision": "16-true"}, r"supports trainer.precision 32-true or bf16-mixed"),
        (
            {"trainer.devices": 2, "model.lora": {"rank": 4}, "model.init": "base"},
            r"does not train LoRA adapters \(model.lora.*use trainer.strategy=ddp",
        ),
    ],
)
def test_what_fsdp_cannot_run_with_is_refused_before_the_data_is_read(tmp_path: Path, monkeypatch, overrides, message):
    def no_data(*args, **kwargs):
        raise AssertionError("the data was read")

    task = "lm" if "model.lora" in overrides else "reverse"
    monkeypatch.setattr(TASKS[task], "build_datamodule", no_data)
    with pytest.raises(ConfigError, match=message):
        attnkit.train(
            task,
            output_dir=str(tmp_path),
            **{"trainer.strategy": "fsdp", "trainer.accelerator": "cpu", **overrides},
        )
