"""``probed_cli`` (the real ``attnkit`` command line, probed in every process of the run) that also
records how the model was held and each training step's loss: what the FSDP tests read to see that
the model really was sharded.

    PROBE_DIR=dir PROBE_LABEL=fsdp [PROBE_PAUSE_AT=N] python fsdp_probed.py train lm ...

Each record gets, besides ``probed_cli``'s: ``dtensors`` (whether every parameter of the model is a
DTensor after the first training step), ``local_numel`` and ``numel`` (the parameters' elements on this process
and in all), ``units`` (the names of the model's FSDP modules, ``""`` for the model itself),
``grads_after_step`` (how many parameters still had a gradient after the first optimiser step),
``mmap_threshold_fixed`` (the results of the process's calls of ``fix_mmap_threshold``),
``compiled`` (for each forward pass of the model traced or run: whether ``torch.compile`` traced it) and
``losses`` (every training batch's loss).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import probed_cli

HERE = Path(__file__).resolve()


def start(probe_dir: Path, label: str, *args: str, pause_at: int | None = None) -> subprocess.Popen:
    """As :func:`probed_cli.start`, with this script's probe."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PROBE_DIR": str(probe_dir)}
    env["PROBE_LABEL"] = label
    env.pop("ATTNKIT_RUN_DIR", None)
    env.pop("PROBE_PAUSE_AT", None)
    if pause_at is not None:
        env["PROBE_PAUSE_AT"] = str(pause_at)
    probe_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(HERE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def run(probe_dir: Path, label: str, *args: str, world: int = 1, timeout: float = 300) -> list[dict[str, Any]]:
    """As :func:`probed_cli.run`, with this script's probe."""
    proc = start(probe_dir, label, *args)
    out, err = probed_cli.finish(proc, probe_dir, label, world, timeout)
    if proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{out}\n{err}")
    return probed_cli.records(probe_dir, label, world)


def _sharding_probe(probe_dir: Path, label: str, pause_at: int | None = None) -> Any:
    import torch
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    base = probed_cli_probe(probe_dir, label, pause_at)

    class ShardingProbe(type(base)):  # type: ignore[misc]  # a class made by probed_cli.probe
        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            super().setup(trainer, pl_module, stage)
            if "compiled" not in self.record:  # once (fit, then test)
                seen = self.record["compiled"] = []
                pl_module.model.register_forward_pre_hook(lambda *_: seen.append(torch.compiler.is_compiling()))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any) -> None:
            if "losses" not in self.record:  # after the first step's backward: every unit resharded
                model = pl_module.model
                params = list(model.parameters())
                self.record["dtensors"] = all(isinstance(p, DTensor) for p in params)
                local = [p.to_local() if isinstance(p, DTensor) else p for p in params]
                self.record["local_numel"] = sum(t.numel() for t in local)
                self.record["numel"] = sum(p.numel() for p in params)
                self.record["units"] = [n for n, m in model.named_modules() if isinstance(m, FSDPModule)]
                self.record["grads_after_step"] = sum(p.grad is not None for p in params)
                self.record["mmap_threshold_fixed"] = FIXED
                self.record["losses"] = []
            self.record["losses"].append(float(outputs["loss"]))
            super().on_train_batch_end(trainer, pl_module, outputs, *args)

    return ShardingProbe()


probed_cli_probe = probed_cli.probe
FIXED: list[bool] = []  # what each call of attnkit.training.module's fix_mmap_threshold returned


def _recording_fix(original: Any) -> Any:
    def fix(*args: Any, **kwargs: Any) -> bool:
        FIXED.append(original(*args, **kwargs))
        return FIXED[-1]

    return fix


if __name__ == "__main__":
    from attnkit.training import module

    probed_cli.probe = _sharding_probe
    module.fix_mmap_threshold = _recording_fix(module.fix_mmap_threshold)
    probed_cli.main()
